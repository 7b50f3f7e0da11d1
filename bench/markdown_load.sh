#!/usr/bin/env bash
# Whole-binary load test of the Markdown conversion: one page served through signpost as HTML and
# as Markdown, in the same run, from the same nginx origin, driven by wrk over loopback.
#
#   bench/markdown_load.sh [seconds per run, default 5] [connections, default 16]
#
# The page is tests/e2e/pages/blog.html padded to about 100 KB with more article paragraphs. What
# it leaves out: TLS, compressed origin bodies, an isolated machine (wrk, signpost and nginx share
# its cores): compare rows of one run. Results are appended to bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-5}
connections=${2:-16}
for tool in wrk nginx; do
  command -v "$tool" >/dev/null || { echo "bench/markdown_load.sh needs $tool (apt-get install wrk nginx-light)" >&2; exit 1; }
done

. bench/lib.sh
bench_scratch

origin_port=$(free_port); signpost_port=$(free_port); admin_port=$(free_port)

python3 - "$work/www/page.html" <<'PY'
import sys
page = open("tests/e2e/pages/blog.html", encoding="utf-8").read()
para = ("<p>Agents now read more of our site than people do. Every page they fetch costs them the "
        "<strong>whole</strong> HTML: <a href=\"/blog/nav\">navigation</a>, scripts, styles.</p>\n")
extra = para * ((100_000 - len(page)) // len(para))
open(sys.argv[1], "w", encoding="utf-8").write(page.replace("<h2>What we measured</h2>", extra + "<h2>What we measured</h2>"))
PY
start_nginx "$origin_port" \
  'types { text/html html; }'

cargo build --release --locked -p signpost --bin signpost >/dev/null
target=$(target_dir)
cat > "$work/policy.toml" <<EOF
listen = ["127.0.0.1:$signpost_port"]
admin = "127.0.0.1:$admin_port"
[[zone]]
name = "bench"
hosts = ["localhost"]
origin = "127.0.0.1:$origin_port"
[zone.markdown]
enabled = true
EOF
RUST_LOG=warn "$target/release/signpost" run --config "$work/policy.toml" --threads 1 2>"$work/signpost.log" &
pids+=($!)
wait_port "$signpost_port"
url="http://localhost:$signpost_port/page.html"
html_bytes=$(curl -s "$url" | wc -c)
md_bytes=$(curl -s -H 'Accept: text/markdown' "$url" | wc -c)

run() { # name [header...]
  local name=$1 rps p50 p99 non2xx
  shift
  read -r rps p50 p99 non2xx _ <<<"$(wrk_measure "$url" "$@")"
  printf '| %-44s | %10s | %8s | %8s | %8s |\n' "$name" "$rps" "$p50" "$p99" "$non2xx"
}

{
  echo
  echo "### $(date -u +%Y-%m-%dT%H:%MZ), Markdown conversion, ${seconds}s per row, ${connections} connections, $(nproc) cores"
  echo
  echo "Command: \`bench/markdown_load.sh $seconds $connections\` (wrk -t1; signpost --threads 1, its conversions on the blocking pool; the page: $html_bytes bytes of HTML, $md_bytes of Markdown)"
  echo
  echo "| target | req/s | p50 | p99 | non-2xx |"
  echo "|---|---|---|---|---|"
  run "signpost, browser Accept (HTML proxied)" "Accept: text/html,*/*;q=0.8"
  run "signpost, Accept: text/markdown (converted)" "Accept: text/markdown"
} | tee -a bench/results.md

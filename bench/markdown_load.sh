#!/usr/bin/env bash
# Whole-binary load test of Markdown for agents: one page served through signpost as HTML
# (proxied), as Markdown from the zone's converted-page cache, and as Markdown converted on every
# request (a zone without the cache), from the same nginx origin, driven by wrk over loopback.
#
#   bench/markdown_load.sh [seconds per row, default 5] [connections, default 16] [rounds, default 3]
#
# The rows are interleaved: each round runs every row once, in the same order, so that drift on
# a shared machine does not favour one; a row's figure is the median of its rounds, and the
# ratio of cached Markdown to proxied HTML is taken within each round, then its median. The
# cached row is checked to be hits (the cache's counters are read from /metrics after the run).
# The page is tests/e2e/pages/blog.html padded to about 100 KB with more article paragraphs;
# nginx sends it with `Cache-Control: max-age=3600`. What it leaves out: TLS, compressed origin
# bodies, an isolated machine (wrk, signpost and nginx share its cores): compare rows of one
# run. Results are appended to bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-5}
connections=${2:-16}
rounds=${3:-3}
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
  'types { text/html html; } expires 1h;'

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
[[zone]]
name = "cached"
hosts = ["cached.test"]
origin = "127.0.0.1:$origin_port"
[zone.markdown]
enabled = true
cache = true
EOF
RUST_LOG=warn "$target/release/signpost" run --config "$work/policy.toml" --threads 1 2>"$work/signpost.log" &
pids+=($!)
wait_port "$signpost_port"
url="http://localhost:$signpost_port/page.html"
cached_host="Host: cached.test"
html_bytes=$(curl -s -H "$cached_host" "$url" | wc -c)
md_bytes=$(curl -s -H "$cached_host" -H 'Accept: text/markdown' "$url" | wc -c)

raw="$work/rows"
row() { # round name [header...]
  local round=$1 name=$2 rps p50 p99 non2xx requests
  shift 2
  read -r rps p50 p99 non2xx requests <<<"$(wrk_measure "$url" "$@")"
  echo "$round|$name|$rps $p50 $p99 $non2xx $requests" >>"$raw"
}
for round in $(seq 1 "$rounds"); do
  row "$round" "signpost, browser Accept (HTML proxied)" "$cached_host" "Accept: text/html,*/*;q=0.8"
  row "$round" "signpost, Accept: text/markdown, cached" "$cached_host" "Accept: text/markdown"
  row "$round" "signpost, Accept: text/markdown (converted)" "Accept: text/markdown"
done
metrics=$(curl -s "http://127.0.0.1:$admin_port/metrics")
hits=$(awk '/^signpost_markdown_cache_requests_total\{.*zone="cached".*result="hit"/ {print $2}' <<<"$metrics")
misses=$(awk '/^signpost_markdown_cache_requests_total\{.*zone="cached".*result="miss"/ {print $2}' <<<"$metrics")

{
  echo
  echo "### $(date -u +%Y-%m-%dT%H:%MZ), Markdown conversion and cache, ${rounds} interleaved rounds, ${seconds}s per row, ${connections} connections, $(nproc) cores"
  echo
  echo "Command: \`bench/markdown_load.sh $seconds $connections $rounds\` (wrk -t1; signpost --threads 1, its conversions on the blocking pool; the page: $html_bytes bytes of HTML, $md_bytes of Markdown; the cached zone answered ${hits:-0} hits and ${misses:-0} misses)"
  echo
  rows_table "$raw" "target" "HTML proxied"
} | tee -a bench/results.md

#!/usr/bin/env bash
# Whole-binary load test: signpost against a bare Pingora proxy and nginx, in the same run, in
# front of the same nginx origin, driven by wrk over loopback.
#
#   bench/load.sh [seconds per row, default 10] [connections, default 32] [rounds, default 3]
#
# What it measures: requests per second and latency through each proxy for a small static
# response, signpost with the default policy and with the criterion benchmark's realistic one,
# and answers made without an origin: signpost's /cdn-cgi/error/1015 as JSON and a host no zone
# serves (1001) beside nginx answering a static 429 with a body of the same size as signpost's
# 1015 JSON. The rows are interleaved: each round runs every row once, in the same order, so
# that drift on this shared machine (other processes, CPU frequency) does not favour one target;
# a row's figure is the median of its rounds, and the ratios to the bare proxy are taken within
# each round, then their median. Beside req/s, the CPU time (user and system, every thread) the
# answering process used over each row, per request: when the proxy is the bottleneck, bare's
# CPU per request over signpost's is the rate ratio a machine of its own would show, and unlike
# req/s it barely moves when other processes take the cores away (they still share caches).
# What it leaves out: TLS, large bodies, and an isolated machine:
# wrk, the proxy and the origin share this machine's cores, so compare rows of one run, not
# runs of different days. Results are appended to bench/results.md with the command line.
#
# LOAD_PIN=1 pins the proxies (bare, signpost) to core 1 and wrk and nginx (origin, and proxy
# in its row) to core 0, so that the proxy measured has a core to itself and does not share its
# caches with the load generator: its rate then follows its own cost per request. The nginx
# proxy row is then not comparable (it shares core 0 with wrk and its origin).
#
# LOAD_ROWS=3 runs only the first three rows (bare, signpost with each policy): more rounds in
# the same time when only the proxied ratios are wanted.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-10}
connections=${2:-32}
rounds=${3:-3}
for tool in wrk nginx python3; do
  command -v "$tool" >/dev/null || { echo "bench/load.sh needs $tool (apt-get install wrk nginx-light)" >&2; exit 1; }
done

. bench/lib.sh
bench_scratch

pin_proxy=(env)
pin_note=
if [ "${LOAD_PIN:-0}" = 1 ]; then
  command -v taskset >/dev/null || { echo "LOAD_PIN=1 needs taskset (util-linux)" >&2; exit 1; }
  [ "$(nproc)" -ge 2 ] || { echo "LOAD_PIN=1 needs two cores" >&2; exit 1; }
  pin_proxy=(taskset -c 1)
  wrk_prefix=(taskset -c 0)
  pin_note="LOAD_PIN=1 "
fi

origin_port=$(free_port); signpost_port=$(free_port); admin_port=$(free_port); bare_port=$(free_port); nginx_proxy_port=$(free_port)
real_port=$(free_port); real_admin_port=$(free_port)

cargo build --release --locked -p signpost --bin signpost --example bare_proxy >/dev/null
target=$(target_dir)

# nginx's static 429 carries a body as long as signpost's 1015 JSON body.
body_len=$("$target/release/signpost" render 1015 --accept application/json | python3 -c 'import sys; print(len(sys.stdin.buffer.read().replace(b"\r\n", b"\n").split(b"\n\n", 1)[1]))')
static_429=$(head -c "$body_len" /dev/zero | tr '\0' 'x')

# The origin: nginx serving a 612-byte page, with keepalive.
head -c 612 /dev/zero | tr '\0' 'x' > "$work/www/index.html"
start_nginx "$origin_port" \
  "upstream origin { server 127.0.0.1:$origin_port; keepalive 64; }
  server {
    listen 127.0.0.1:$nginx_proxy_port; keepalive_requests 1000000;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
    location = /429 { default_type application/json; return 429 \"$static_429\"; }
  }"
if [ "${LOAD_PIN:-0}" = 1 ]; then
  nginx_master=$(cat "$work/nginx.pid")
  for pid in "$nginx_master" $(pgrep -P "$nginx_master"); do taskset -a -pc 0 "$pid" >/dev/null; done
fi

cat > "$work/policy.toml" <<EOF
listen = ["127.0.0.1:$signpost_port"]
admin = "127.0.0.1:$admin_port"
# wrk's connections all come from 127.0.0.1: lift the per-client connection cap.
[connections]
max_per_client = 1000000
[[zone]]
name = "bench"
hosts = ["localhost", "127.0.0.1"]
origin = "127.0.0.1:$origin_port"
EOF
RUST_LOG=warn "${pin_proxy[@]}" "$target/release/signpost" run --config "$work/policy.toml" --threads 1 2>"$work/signpost.log" &
pids+=($!)
signpost_pid=$!
# The realistic policy of the criterion benchmark (10,000 CIDRs, geo rules when ../shared has the
# databases, 100 custom rules, 3 rate limits), in front of the same origin.
{
  echo "listen = [\"127.0.0.1:$real_port\"]"
  echo "admin = \"127.0.0.1:$real_admin_port\""
  printf '[connections]\nmax_per_client = 1000000\n'
  cargo run --release --locked -q -p signpost-bench --example realistic_policy | sed "s/127.0.0.1:8000/127.0.0.1:$origin_port/"
} > "$work/realistic.toml"
RUST_LOG=warn "${pin_proxy[@]}" "$target/release/signpost" run --config "$work/realistic.toml" --threads 1 2>"$work/realistic.log" &
pids+=($!)
realistic_pid=$!
"${pin_proxy[@]}" "$target/release/examples/bare_proxy" "127.0.0.1:$bare_port" "127.0.0.1:$origin_port" 1 2>"$work/bare.log" &
pids+=($!)
bare_pid=$!
wait_port "$signpost_port"; wait_port "$bare_port"; wait_port "$nginx_proxy_port"; wait_port "$real_port"


# The rows, in the order each round runs them: name|pid|answers|url|header|header. The pid is
# the process answering the row (- for nginx, whose one instance is both proxy and origin);
# answers is 2xx where every answer must be a success (a proxied row: anything else means the
# row measured something other than proxying, and the run stops) or refusal.
rows=(
  "bare Pingora proxy|$bare_pid|2xx|http://127.0.0.1:$bare_port/index.html"
  "signpost proxy (default policy)|$signpost_pid|2xx|http://localhost:$signpost_port/index.html"
  "signpost proxy (realistic policy)|$realistic_pid|2xx|http://127.0.0.1:$real_port/index.html|Host: example.com|User-Agent: wrk"
  "nginx proxy|-|2xx|http://127.0.0.1:$nginx_proxy_port/index.html"
  "origin direct (nginx)|-|2xx|http://127.0.0.1:$origin_port/index.html"
  "nginx static 429, same body size|-|refusal|http://127.0.0.1:$nginx_proxy_port/429"
  "signpost /cdn-cgi/error/1015 JSON|$signpost_pid|refusal|http://localhost:$signpost_port/cdn-cgi/error/1015|Accept: application/json"
  "signpost 1001 unknown host, Markdown|$signpost_pid|refusal|http://127.0.0.1:$signpost_port/|Host: unknown.test|Accept: text/markdown"
)

if [ -n "${LOAD_ROWS:-}" ]; then
  rows=("${rows[@]:0:$LOAD_ROWS}")
  pin_note="${pin_note}LOAD_ROWS=$LOAD_ROWS "
fi

# CPU time (user + system, all threads) a process has used, in clock ticks.
cpu_ticks() { # pid
  if [ "$1" = - ]; then echo 0; return; fi
  # Fields after the command name, which is in parentheses and may hold spaces.
  awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$1/stat"
}
ticks_per_second=$(getconf CLK_TCK)

raw="$work/raw.txt"
: > "$raw"
for round in $(seq 1 "$rounds"); do
  for row in "${rows[@]}"; do
    IFS='|' read -r -a fields <<<"$row"
    before=$(cpu_ticks "${fields[1]}")
    figures=$(wrk_measure "${fields[@]:3}")
    after=$(cpu_ticks "${fields[1]}")
    read -r _ _ _ non2xx _ <<<"$figures"
    if [ "${fields[2]}" = 2xx ] && [ "$non2xx" != 0 ]; then
      echo "bench/load.sh: '${fields[0]}' got $non2xx answers that are not 2xx in round $round; nothing recorded" >&2
      exit 1
    fi
    # The CPU the answering process used over the row, in microseconds per request answered.
    cpu=$(awk -v t=$((after - before)) -v hz="$ticks_per_second" -v pid="${fields[1]}" '
      { if (pid == "-" || $5 == 0) print "-"; else printf "%.1f", t / hz * 1e6 / $5 }' <<<"$figures")
    echo "$round|${fields[0]}|$figures $cpu" >> "$raw"
  done
done

{
  echo
  echo "### $(date -u +%Y-%m-%dT%H:%MZ), ${rounds} interleaved rounds, ${seconds}s per row, ${connections} connections, $(nproc) cores"
  echo
  echo "Command: \`${pin_note}bench/load.sh $seconds $connections $rounds\` (wrk -t1; nginx, the bare Pingora proxy and signpost each run one worker thread; CPU: user and system time of the answering process over the row, per request)"
  echo
  python3 - "$raw" <<'PY'
import statistics, sys
rounds = {}
order = []
for line in open(sys.argv[1]):
    r, name, figures = line.rstrip("\n").split("|")
    rps, p50, p99, non2xx, _, cpu = figures.split()
    cpu = None if cpu == "-" else float(cpu)
    rounds.setdefault(name, []).append((int(r), float(rps), p50, p99, non2xx, cpu))
    if name not in order:
        order.append(name)
bare = {r: rps for r, rps, *_ in rounds["bare Pingora proxy"]}
bare_cpu = {r: c for r, *_, c in rounds["bare Pingora proxy"]}
print("| target | req/s (median) | req/s per round | p50 | p99 | non-2xx | vs bare, per round | vs bare (median) | CPU µs per request (median) | bare's CPU per request / this one's (median) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name in order:
    runs = rounds[name]
    med = statistics.median(rps for _, rps, *_ in runs)
    mid = sorted(runs, key=lambda x: x[1])[len(runs) // 2]
    ratios = [rps / bare[r] for r, rps, *_ in runs]
    cpus = [(r, c) for r, *_, c in runs if c]
    cpu_med = f"{statistics.median(c for _, c in cpus):.1f}" if cpus else "-"
    cpu_ratio = f"{statistics.median(bare_cpu[r] / c for r, c in cpus if bare_cpu.get(r)):.2f}" if cpus else "-"
    print(f"| {name} | {med:.0f} | {' / '.join(f'{rps:.0f}' for _, rps, *_ in runs)} | {mid[2]} | {mid[3]} | {mid[4]} "
          f"| {' / '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f} | {cpu_med} | {cpu_ratio} |")
PY
} | tee -a bench/results.md

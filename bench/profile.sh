#!/usr/bin/env bash
# Where signpost's time goes, in instructions: callgrind counts every instruction the proxy runs
# for a fixed number of proxied requests, for signpost (default and realistic policy) and for the
# bare Pingora proxy. Instruction counts do not depend on what else the machine is doing, so
# unlike req/s they can be compared across runs and days.
#
#   bench/profile.sh [requests, default 2000]
#
# PROFILE_TARGETS picks the targets, in order, the first being the baseline of "vs bare" (default
# "bare signpost realistic"; also "identifying": the default policy with `[bots]`).
#
# Each target is run twice, with N and 2N keep-alive requests from one client; the difference
# divided by N is the cost of one request with start-up and shutdown taken out. The top functions
# (inclusive) of the 2N run are printed from callgrind_annotate. Needs valgrind and nginx.
set -euo pipefail
cd "$(dirname "$0")/.."

requests=${1:-2000}
for tool in valgrind callgrind_annotate nginx python3; do
  command -v "$tool" >/dev/null || { echo "bench/profile.sh needs $tool (apt-get install valgrind nginx-light)" >&2; exit 1; }
done

# PROFILE_KEEP=<dir> keeps the callgrind files for callgrind_annotate or kcachegrind.
bench_keep() {
  if [ -n "${PROFILE_KEEP:-}" ]; then mkdir -p "$PROFILE_KEEP" && cp "$work"/*.out "$PROFILE_KEEP"/ 2>/dev/null || true; fi
}
. bench/lib.sh
bench_scratch

origin_port=$(free_port)
head -c 612 /dev/zero | tr '\0' 'x' > "$work/www/index.html"
start_nginx "$origin_port"

cargo build --release --locked -p signpost --bin signpost --example bare_proxy >/dev/null
cargo run --release --locked -q -p signpost-bench --example realistic_policy > "$work/realistic-zones.toml"
target=$(target_dir)

# Sends `count` GET requests on one keep-alive connection and checks every answer is a 200.
client() { # port host count
  python3 - "$1" "$2" "$3" <<'PY'
import http.client, sys
port, host, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for _ in range(count):
    c.request("GET", "/index.html", headers={"Host": host, "User-Agent": "profile"})
    r = c.getresponse()
    r.read()
    assert r.status == 200, r.status
PY
}

# Runs target `name` under callgrind for `count` requests; prints its total instruction count.
measure() { # name count
  local name=$1 count=$2 port host=localhost cmd
  port=$(free_port)
  case $name in
    bare)
      cmd=("$target/release/examples/bare_proxy" "127.0.0.1:$port" "127.0.0.1:$origin_port" 1) ;;
    signpost)
      printf 'listen = ["127.0.0.1:%s"]\nadmin = "off"\n[[zone]]\nname = "bench"\nhosts = ["localhost"]\norigin = "127.0.0.1:%s"\n' \
        "$port" "$origin_port" > "$work/$name.$count.toml"
      cmd=("$target/release/signpost" run --config "$work/$name.$count.toml" --threads 1 --grace-period 0) ;;
    identifying)
      # The default policy, identifying every request (`[bots]`: the shipped bot catalog, Web
      # Bot Auth): what a request with no signature and no bot's User-Agent costs then.
      printf 'listen = ["127.0.0.1:%s"]\nadmin = "off"\n[bots]\n[[zone]]\nname = "bench"\nhosts = ["localhost"]\norigin = "127.0.0.1:%s"\n' \
        "$port" "$origin_port" > "$work/$name.$count.toml"
      cmd=("$target/release/signpost" run --config "$work/$name.$count.toml" --threads 1 --grace-period 0) ;;
    realistic)
      host=example.com
      { printf 'listen = ["127.0.0.1:%s"]\nadmin = "off"\n' "$port"
        sed "s/127.0.0.1:8000/127.0.0.1:$origin_port/" "$work/realistic-zones.toml"; } > "$work/$name.$count.toml"
      cmd=("$target/release/signpost" run --config "$work/$name.$count.toml" --threads 1 --grace-period 0) ;;
  esac
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/$name.$count.out" "${cmd[@]}" \
    >"$work/$name.$count.log" 2>&1 &
  local pid=$!
  wait_port "$port" 1200
  client "$port" "$host" "$count"
  # SIGINT is Pingora's fast shutdown: on SIGTERM the bare proxy, which has no --grace-period,
  # would wait Pingora's default five minutes before exiting.
  kill -INT "$pid"
  wait "$pid" || true
  awk '/^summary:|^totals:/ {print $2; exit}' "$work/$name.$count.out"
}

echo "### $(date -u +%Y-%m-%dT%H:%MZ): instructions per proxied request (callgrind)"
echo
echo "Command: \`bench/profile.sh $requests\` ($requests and $((2 * requests)) keep-alive requests on one connection; (I(2N) - I(N)) / N)"
echo
echo "| target | instructions per request | vs bare |"
echo "|---|---|---|"
bare_per=
for name in ${PROFILE_TARGETS:-bare signpost realistic}; do
  small=$(measure "$name" "$requests")
  big=$(measure "$name" "$((2 * requests))")
  per=$(( (big - small) / requests ))
  [ -z "$bare_per" ] && bare_per=$per
  printf '| %s | %s | %s |\n' "$name" "$per" "$(python3 -c "print(f'{$per / $bare_per:.2f}x')")"
done

echo
# Where the difference goes: each function's own (exclusive) instructions per request, from the
# same (I(2N) - I(N)) / N difference, for signpost against the bare proxy.
per_function() { # name
  python3 - "$work/$1.$requests.out" "$work/$1.$((2 * requests)).out" "$requests" <<'PY'
import re, subprocess, sys
def exclusive(path):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=no", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    costs = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            # "file:function (123x) [object]": the call count differs between runs.
            name = re.sub(r"^[^:]*:", "", m.group(2)).split(" [")[0]
            name = re.sub(r" \([\d,]+x\)$", "", name)
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs
small, big, n = exclusive(sys.argv[1]), exclusive(sys.argv[2]), int(sys.argv[3])
for name in set(small) | set(big):
    print(f"{(big.get(name, 0) - small.get(name, 0)) / n:.1f}\t{name}")
PY
}
per_function bare > "$work/bare.per"
per_function signpost > "$work/signpost.per"
echo "Functions whose own instructions per request grew most, signpost (default policy) against bare:"
echo
echo "| instructions per request, signpost | bare | difference | function |"
echo "|---|---|---|---|"
python3 - "$work/bare.per" "$work/signpost.per" <<'PY'
import sys
def load(path):
    d = {}
    for line in open(path):
        cost, name = line.rstrip("\n").split("\t", 1)
        d[name] = float(cost)
    return d
bare, sp = load(sys.argv[1]), load(sys.argv[2])
rows = sorted(((sp.get(k, 0) - bare.get(k, 0), k) for k in set(bare) | set(sp)), reverse=True)
for diff, name in rows[:30]:
    print(f"| {sp.get(name, 0):.0f} | {bare.get(name, 0):.0f} | {diff:+.0f} | `{name[:110]}` |")
PY

#!/usr/bin/env bash
# Fleet rate limits under load: the same signpost binary with no rate limit, with an instance
# rule, and with a fleet rule counting in a real redis-server on loopback, driven by wrk, in the
# same run with interleaved rounds (each round runs every row once, in the same order), so that
# drift on a shared machine favours no row. Redis calls are counted with INFO commandstats.
#
#   bench/fleet_load.sh [seconds per row, default 10] [connections, default 32] [rounds, default 3]
#
# Each rule has a limit no request reaches (every request is counted, none refused), so the
# fleet row pays one Redis round trip per request: the worst case. A last row sends every
# request with a key that is already refused, which must cost Redis nothing.
# Needs wrk, nginx (the origin), redis-server and redis-cli. Results are appended to
# bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-10}
connections=${2:-32}
rounds=${3:-3}
for tool in wrk nginx redis-server redis-cli python3 curl; do
  command -v "$tool" >/dev/null || { echo "bench/fleet_load.sh needs $tool (apt-get install wrk nginx-light redis-server curl)" >&2; exit 1; }
done

. bench/lib.sh
bench_scratch

cargo build --release --locked -p signpost --bin signpost >/dev/null
target=$(target_dir)

origin_port=$(free_port); redis_port=$(free_port)
head -c 612 /dev/zero | tr '\0' 'x' > "$work/www/index.html"
start_nginx "$origin_port"
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >/dev/null &
pids+=($!)
wait_port "$redis_port"

# start <listen port> <admin port> <policy text before the zone>
start() {
  {
    echo "listen = [\"127.0.0.1:$1\"]"
    echo "admin = \"127.0.0.1:$2\""
    echo "$3"
    echo '[[zone]]'
    echo 'name = "bench"'
    echo 'hosts = ["localhost"]'
    echo "origin = \"127.0.0.1:$origin_port\""
  } > "$work/$1.toml"
  RUST_LOG=warn "$target/release/signpost" run --config "$work/$1.toml" --threads 1 2>"$work/$1.log" &
  pids+=($!)
  wait_port "$1"
}
# rule <scope> <characteristic> <requests per period>
rule() {
  printf '[[rate_limit]]\nid = "bench"\nscope = "%s"\ncharacteristics = [%s]\nperiod = "1h"\nrequests_per_period = %s\n' "$1" "$2" "$3"
}
redis_section=$(printf '[redis]\nurl = "redis://127.0.0.1:%s"\ntimeout = "5ms"\n' "$redis_port")
no_rule=$(free_port); local_rule=$(free_port); fleet_rule=$(free_port); refused_rule=$(free_port)
fleet_admin=$(free_port); refused_admin=$(free_port)
start "$no_rule" "$(free_port)" ""
start "$local_rule" "$(free_port)" "$(rule instance "'ip.src'" 4000000000)"
start "$fleet_rule" "$fleet_admin" "$redis_section
$(rule fleet "'http.request.headers[\"x-key\"]'" 4000000000)"
start "$refused_rule" "$refused_admin" "$redis_section
$(rule fleet "'ip.src'" 1)"

evalsha() { redis-cli -p "$redis_port" INFO commandstats | tr -d '\r' | awk -F'[=,]' '/^cmdstat_evalsha:/ {print $2; f=1} END {if (!f) print 0}'; }
answered() { # admin port -> fleet calls Redis answered, from the edge's metrics
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^signpost_fleet_calls_total\{outcome="(allowed|refused)"\}/ {s+=$2} END {print s+0}'
}


# Prime the refused row: its one allowed request, then the refusal Redis answers.
curl -s -o /dev/null "http://localhost:$refused_rule/index.html"
curl -s -o /dev/null "http://localhost:$refused_rule/index.html"

raw="$work/raw.txt"
: > "$raw"
for round in $(seq 1 "$rounds"); do
  echo "$round|no rate limit|$(wrk_measure "http://localhost:$no_rule/index.html")|-" >> "$raw"
  echo "$round|instance rule|$(wrk_measure "http://localhost:$local_rule/index.html")|-" >> "$raw"
  before=$(evalsha)
  figures=$(wrk_measure "http://localhost:$fleet_rule/index.html" "x-key: round-$round")
  echo "$round|fleet rule (Redis on loopback)|$figures|$(( $(evalsha) - before ))" >> "$raw"
  before=$(evalsha)
  figures=$(wrk_measure "http://localhost:$refused_rule/index.html")
  echo "$round|fleet rule, key already refused|$figures|$(( $(evalsha) - before ))" >> "$raw"
done

{
  echo
  echo "### fleet rate limits: $(date -u +%Y-%m-%dT%H:%MZ), ${rounds} interleaved rounds, ${seconds}s per row, ${connections} connections, $(nproc) cores"
  echo
  echo "Command: \`bench/fleet_load.sh $seconds $connections $rounds\` (wrk -t1; each signpost runs one worker thread; $(redis-server --version | awk '{print $1, $2, $3}'))"
  echo
  python3 - "$raw" <<'PY'
import statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    r, name, figures, calls = line.rstrip("\n").split("|")
    rps, p50, p99, non2xx, req = figures.split()
    rows.setdefault(name, []).append((float(rps), p50, p99, non2xx, int(req), calls))
    if name not in order:
        order.append(name)
local = [x[0] for x in rows["instance rule"]]
print("| row | req/s (median) | vs instance rule (median of rounds) | p50 | p99 | non-2xx | EVALSHA calls / requests |")
print("|---|---|---|---|---|---|---|")
for name in order:
    rs = rows[name]
    med = statistics.median(x[0] for x in rs)
    ratio = statistics.median(x[0] / l for x, l in zip(rs, local))
    mid = sorted(rs, key=lambda x: x[0])[len(rs) // 2]
    calls = "-" if rs[0][5] == "-" else f"{sum(int(x[5]) for x in rs)} / {sum(x[4] for x in rs)}"
    print(f"| {name} | {med:.0f} | {ratio:.2f} | {mid[1]} | {mid[2]} | {mid[3]} | {calls} |")
PY
  echo
  echo "Fleet calls Redis answered, from the edges' metrics: $(answered "$fleet_admin") on the fleet row; $(answered "$refused_admin") on the refused row (its two priming requests)."
} | tee -a bench/results.md

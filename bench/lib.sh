# Shared by the bench scripts (sourced from the repository root).

# A loopback port nobody listens on right now, never one this script was given before (they are
# listed in $work/ports, so call bench_scratch first), and outside the kernel's ephemeral range:
# a port the kernel picked for bind(0) could be picked again by the next call, or taken by an
# outgoing connection before the server that was meant to have it binds it.
free_port() {
  python3 - "${work:?free_port needs bench_scratch}/ports" <<'PY'
import os, random, socket, sys
given = sys.argv[1]
try:
    first, last = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
except (OSError, ValueError):
    first, last = 32768, 60999
low, high = (10000, first) if first >= 12000 else (last + 1, 65536)
taken = set(open(given).read().split()) if os.path.exists(given) else set()
start = random.randrange(high - low)
for i in range(high - low):
    port = low + (start + i) % (high - low)
    if str(port) in taken:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    with open(given, "a") as f:
        f.write(f"{port}\n")
    print(port)
    sys.exit(0)
sys.exit(f"no free port in {low}..{high}")
PY
}

# Waits until something accepts connections on loopback port $1, polling every 50 ms, at most
# $2 times (default 200: 10 s; callgrind's slow start-up needs more).
wait_port() {
  for _ in $(seq 1 "${2:-200}"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1" >&2; exit 1
}

# A scratch directory, $work, with www/ (nginx's document root) and tmp/, readable by nginx's
# unprivileged workers. On exit every process in $pids and the nginx of start_nginx are stopped,
# `bench_keep` (if the script defines it) runs, and the directory is removed.
bench_scratch() {
  work=$(mktemp -d)
  chmod 755 "$work"
  mkdir -p "$work/www" "$work/tmp"
  pids=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  # SIGINT: Pingora's fast shutdown (on SIGTERM the bare proxy would linger for its five-minute grace period).
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  if declare -F bench_keep >/dev/null; then bench_keep; fi
  rm -rf "$work"
}

# Starts nginx, one worker, serving $work/www on loopback port $1 with keep-alive, and waits for
# it; the other arguments are added to its http block (more servers, types).
start_nginx() {
  local port=$1; shift
  cat > "$work/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/tmp; proxy_temp_path $work/tmp; fastcgi_temp_path $work/tmp;
  uwsgi_temp_path $work/tmp; scgi_temp_path $work/tmp;
  server { listen 127.0.0.1:$port; root $work/www; keepalive_requests 1000000; }
  $*
}
NGINX
  nginx -c "$work/nginx.conf"
  wait_port "$port"
}

# The cargo target directory, where the release binaries are.
target_dir() {
  cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])'
}

# What wrk runs under (a script may set it to `taskset -c 0` to pin it to a core).
wrk_prefix=(env)

# One wrk run of $seconds with $connections against url $1 with headers $2...; prints
# "req/s p50 p99 non-2xx requests".
wrk_measure() {
  local url=$1
  shift
  local headers=() out
  for h in "$@"; do headers+=(-H "$h"); done
  out=$("${wrk_prefix[@]}" wrk -t1 -c"$connections" -d"${seconds}s" --latency "${headers[@]}" "$url")
  awk '/Requests\/sec/ {rps=$2} $1=="50%" {p50=$2} $1=="99%" {p99=$2} /Non-2xx/ {n=$NF}
       / requests in / {req=$1}
       END {printf "%s %s %s %s %s\n", rps, p50, p99, (n == "" ? 0 : n), req}' <<<"$out"
}

# The table of an interleaved run: $1 holds lines `round|row name|req/s p50 p99 non-2xx requests`
# (the first row named is the baseline); prints one Markdown row per name with its median rate,
# the p50/p99/non-2xx of its median round, and the median of its per-round ratios to the
# baseline. $2 names the first column, $3 the baseline in the last one.
rows_table() { # raw first-column baseline
  python3 - "$1" "$2" "$3" <<'PY'
import statistics, sys
path, first, baseline = sys.argv[1:]
rows, order = {}, []
for line in open(path):
    r, name, figures = line.rstrip("\n").split("|")
    rps, p50, p99, non2xx, _ = figures.split()
    if name not in rows:
        rows[name] = []
        order.append(name)
    rows[name].append((int(r), float(rps), p50, p99, non2xx))
print(f"| {first} | req/s (median) | p50 | p99 | non-2xx | vs {baseline} |")
print("|---|---|---|---|---|---|")
base = {r: rps for r, rps, *_ in rows[order[0]]}
for name in order:
    runs = rows[name]
    rps = statistics.median(x[1] for x in runs)
    mid = sorted(runs, key=lambda x: x[1])[len(runs) // 2]
    ratio = statistics.median(x[1] / base[x[0]] for x in runs if base.get(x[0]))
    print(f"| {name} | {rps:,.0f} | {mid[2]} | {mid[3]} | {mid[4]} | {ratio:.2f} |")
PY
}

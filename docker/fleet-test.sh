# docker/fleet-test.sh: the fleet stage of docker/test.sh, which sources it after its other checks
# (it uses that script's log/ok/die, clean-up, $image, $run, $run_id and compose_cmd).
#
# Starts docker/fleet.yaml as it is (three edges, Redis, the demo origin; docker/fleet-policy.toml:
# 10 requests per 10 s per client address, fleet scope, on_error = "local") with the image under
# test and the redis:7 stand-in, and proves with clients in containers on the `fleet` network (one
# container per client address, so each one is a fresh key):
#   1. 30 requests from client A spread over the three edges: exactly 10 pass;
#   2. edge3 is cut off from Redis alone (`docker network disconnect` from the `redis` network):
#      client B's 20 requests over edge1 and edge2 still share one count (exactly 10 pass), B's
#      12 requests to edge3 get no 5xx and are counted by edge3 alone (exactly 10 pass, where the
#      shared count would let none through), and edge3's signpost_fleet_fallbacks_total says so;
#   3. edge3 is connected again: it returns to Redis by itself (no restart), and client C's 30
#      requests over the three edges pass exactly 10 times again, with no fallback anywhere.

fleet_limit=10 # requests_per_period in docker/fleet-policy.toml
grep -qE "^requests_per_period = $fleet_limit\$" "$repo/docker/fleet-policy.toml" \
    || die "docker/fleet-policy.toml no longer has requests_per_period = $fleet_limit"

# Down the compose.yaml project first: cleanup() handles one project at a time.
if [[ -n $compose_project ]]; then
    "${compose_cmd[@]}" down --timeout 3 --volumes --remove-orphans >/dev/null 2>&1
    compose_project=
fi

fleet_dir=$run/fleet
mkdir -p "$fleet_dir"
# The client: `spread EDGES N` sends N requests round-robin over EDGES (comma list), one at a
# time, and prints "edge status retry-after" per request (status 0: no answer);
# `metric EDGE NAME [LABEL=VALUE...]` prints the sum of the matching samples of EDGE's /metrics.
cat >"$fleet_dir/client.py" <<'EOF'
import sys, urllib.error, urllib.request

opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy from the env

def get(url):
    try:
        with opener.open(url, timeout=5) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()
    except Exception as e:
        print("no answer from %s: %s" % (url, e), file=sys.stderr)
        return 0, {}, b""

if sys.argv[1] == "spread":
    edges = sys.argv[2].split(",")
    for i in range(int(sys.argv[3])):
        edge = edges[i % len(edges)]
        status, headers, _ = get("http://%s:8080/" % edge)
        print(edge, status, headers.get("retry-after") or "-")
elif sys.argv[1] == "metric":
    status, _, body = get("http://%s:9901/metrics" % sys.argv[2])
    if status != 200:
        sys.exit("metrics of %s: status %s" % (sys.argv[2], status))
    want = sys.argv[4:]
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        series, value = line.rsplit(None, 1)
        name, _, labels = series.partition("{")
        if name == sys.argv[3] and all('%s="%s"' % tuple(kv.split("=", 1)) in labels for kv in want):
            total += float(value)
    print("%g" % total)
EOF
chmod 0755 "$fleet_dir"
chmod 0644 "$fleet_dir/client.py"

log "docker/fleet.yaml with ${compose_cmd[0]}: three edges, Redis ($redis_image), the origin"
fleet_start=$SECONDS
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for i in 1 2 3; do
    export "SIGNPOST_FLEET_PORT$i=$(free_port)" "SIGNPOST_FLEET_ADMIN$i=$(free_port)"
done
export SIGNPOST_IMAGE=$image SIGNPOST_REDIS_IMAGE=$redis_image
compose_project=${run_id//-/}fleet
compose_cmd=("${compose_cmd[0]}")
[[ ${compose_cmd[0]} == docker ]] && compose_cmd+=(compose)
compose_cmd+=(-p "$compose_project" -f "$repo/docker/fleet.yaml")
"${compose_cmd[@]}" up -d --no-build >"$fleet_dir/up.log" 2>&1 \
    || { cat "$fleet_dir/up.log" >&2; die "fleet: compose up failed"; }
net_fleet=${compose_project}_fleet
net_redis=${compose_project}_redis
edge3=$("${compose_cmd[@]}" ps -q edge3)
[[ -n $edge3 ]] || die "fleet: no edge3 container"
ok "up in $((SECONDS - fleet_start)) s: networks $net_fleet, $net_redis (internal)"

# One client container per client address (a fresh rate-limit key each).
declare -A client
for c in a b c probe; do
    client[$c]=$run_id-client-$c
    containers+=("${client[$c]}")
    docker run -d --name "${client[$c]}" --network "$net_fleet" --user 65534:65534 \
        -v "$fleet_dir/client.py:/client.py:ro" python:3-slim sleep infinity >/dev/null
done

# fleet_spread CLIENT EDGES N: the requests' lines, also appended to $fleet_dir/requests.log.
fleet_spread() {
    docker exec "${client[$1]}" python3 /client.py spread "$2" "$3" | tee -a "$fleet_dir/requests.log"
}
# count STATUS < lines
count() { awk -v s="$1" '$2 == s' | wc -l; }
metric() { docker exec "${client[probe]}" python3 /client.py metric "$@"; }
# Redis answered (allowed or refused) on EDGE, and the fallbacks of EDGE.
answered() { echo $(($(metric "$1" signpost_fleet_calls_total outcome=allowed | cut -d. -f1) \
    + $(metric "$1" signpost_fleet_calls_total outcome=refused | cut -d. -f1))); }
fallbacks() { metric "$1" signpost_fleet_fallbacks_total | cut -d. -f1; }
# check_spread LABEL LINES PASS TOTAL: exactly PASS of TOTAL got 200, the rest 429, none a 5xx.
check_spread() {
    local label=$1 lines=$2 pass=$3 total=$4 got refused
    got=$(count 200 <<<"$lines")
    refused=$(count 429 <<<"$lines")
    if ((got != pass || refused != total - pass)); then
        awk '{print $2}' <<<"$lines" | sort | uniq -c | sed 's/^/    status count: /' >&2
        die "fleet: $label: $got passed and $refused were refused, want $pass and $((total - pass))"
    fi
    # Every refusal says when to come back, within the 10 s window.
    awk '$2 == 429 && !($3 >= 1 && $3 <= 10) {bad = 1} END {exit bad}' <<<"$lines" \
        || die "fleet: $label: a 429 without a Retry-After in 1..10"
    ok "$label: $got of $total passed, $refused refused (429 with Retry-After)"
}

# Wait until every edge serves and has counted in Redis (the connection is lazy; Redis may have
# started after the edges): the probe client asks each edge at most once a second, so its own
# key stays under the limit on every edge.
ready=()
for _ in $(seq 30); do
    for i in 1 2 3; do
        [[ ${ready[$i]:-0} == 1 ]] && continue
        docker exec "${client[probe]}" python3 /client.py spread "edge$i" 1 >/dev/null 2>&1 || true
        if (($(answered "edge$i" 2>/dev/null || echo 0) > 0)); then ready[$i]=1; fi
    done
    ((${ready[1]:-0} && ${ready[2]:-0} && ${ready[3]:-0})) && break
    sleep 1
done
((${ready[1]:-0} && ${ready[2]:-0} && ${ready[3]:-0})) \
    || die "fleet: not every edge counted in Redis within 30 s (ready: ${ready[*]})"
ok "the three edges count in Redis ($((SECONDS - fleet_start)) s after compose up)"

fb1=$(fallbacks edge1) fb2=$(fallbacks edge2) fb3=$(fallbacks edge3)

log "fleet 1: 30 requests from client A spread over edge1, edge2, edge3"
lines=$(fleet_spread a edge1,edge2,edge3 30)
check_spread "shared count over three edges" "$lines" "$fleet_limit" 30
(($(fallbacks edge1) == fb1 && $(fallbacks edge2) == fb2 && $(fallbacks edge3) == fb3)) \
    || die "fleet: an edge fell back while Redis was reachable"
ok "no fallback on any edge"

log "fleet 2: edge3 cut off from Redis (docker network disconnect $net_redis edge3)"
edge3_ip() { docker inspect -f "{{ with index .NetworkSettings.Networks \"$net_redis\" }}{{ .IPAddress }}{{ end }}" "$edge3"; }
ip_before=$(edge3_ip)
docker network disconnect "$net_redis" "$edge3"
lines=$(fleet_spread b edge1,edge2 20)
check_spread "client B over edge1 and edge2 (still connected)" "$lines" "$fleet_limit" 20
lines=$(fleet_spread b edge3 12)
check_spread "client B on edge3 (cut off: counted locally)" "$lines" "$fleet_limit" 12
fb3_cut=$(fallbacks edge3)
((fb3_cut - fb3 == 12)) || die "fleet: edge3 fell back $((fb3_cut - fb3)) times, want 12 (one per request)"
ok "edge3 signpost_fleet_fallbacks_total +12: $(metric edge3 signpost_fleet_fallbacks_total action=local) with action=local"
(($(fallbacks edge1) == fb1 && $(fallbacks edge2) == fb2)) \
    || die "fleet: edge1 or edge2 fell back while they could reach Redis"
ok "edge1 and edge2: no fallback"

log "fleet 3: edge3 connected again (docker network connect $net_redis edge3)"
# SIGNPOST_FLEET_NEW_IP=1: a placeholder takes edge3's old address first, so that edge3 comes
# back with another one and its old connection to Redis is dead for good (not only stalled).
if [[ ${SIGNPOST_FLEET_NEW_IP:-0} == 1 ]]; then
    containers+=("$run_id-placeholder")
    # Docker hands out the lowest free address of the network: edge3's old one.
    docker run -d --name "$run_id-placeholder" --network "$net_redis" \
        python:3-slim sleep infinity >/dev/null
fi
docker network connect "$net_redis" "$edge3"
ip_after=$(edge3_ip)
ok "edge3's address on the redis network: $ip_before before, $ip_after after"
if [[ ${SIGNPOST_FLEET_NEW_IP:-0} == 1 && $ip_after == "$ip_before" ]]; then
    die "fleet: SIGNPOST_FLEET_NEW_IP=1 but edge3 got its old address back"
fi
reconnect_start=$SECONDS
before=$(answered edge3)
back=0
for _ in $(seq 30); do
    docker exec "${client[probe]}" python3 /client.py spread edge3 1 >/dev/null 2>&1 || true
    if (($(answered edge3) > before)); then back=1; break; fi
    sleep 1
done
((back)) || die "fleet: edge3 did not return to Redis within 30 s of reconnecting"
ok "edge3 counts in Redis again after $((SECONDS - reconnect_start)) s, without a restart"
fb1=$(fallbacks edge1) fb2=$(fallbacks edge2) fb3=$(fallbacks edge3)
lines=$(fleet_spread c edge1,edge2,edge3 30)
check_spread "client C over the three edges" "$lines" "$fleet_limit" 30
(($(fallbacks edge1) == fb1 && $(fallbacks edge2) == fb2 && $(fallbacks edge3) == fb3)) \
    || die "fleet: an edge fell back after edge3 was connected again"
ok "no fallback on any edge: shared counting resumed"

# The clients first: a network with containers attached cannot be removed.
for c in "${!client[@]}"; do docker rm -f "${client[$c]}" >/dev/null; done
docker rm -f "$run_id-placeholder" >/dev/null 2>&1 || true
# The origin (python as pid 1) ignores SIGTERM: do not wait Docker's 10 s for it.
"${compose_cmd[@]}" down --timeout 3 --volumes --remove-orphans >/dev/null 2>&1
compose_project=
ok "fleet stage: $((SECONDS - fleet_start)) s"

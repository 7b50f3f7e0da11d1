#!/usr/bin/env bash
# Whole-binary load test of who-is-asking and pay per crawl: what a request costs the edge when it
# carries a Web Bot Auth signature that verifies, one that does not, and a paid crawl whose charge
# is recorded in the ledger (a write and an fdatasync, grouped), against a request from no bot.
#
#   bench/crawl_load.sh [seconds per row, default 5] [connections, default 16] [rounds, default 3]
#
# Every signed request carries a signature of its own (20,000 per row, made before the run with
# Python's `cryptography`, each with its own nonce, cycled by a wrk Lua script): more than the
# edge keeps verdicts for (16,384), so each one is checked with Ed25519 as a new agent's request
# would be, not answered from the verdict cache. The key directory is served over HTTPS on
# loopback (Python's http.server, a certificate made with `cryptography`); the origin is nginx with a
# 2 KB page. Rows are interleaved; a row's ratio to the no-bot row is taken within each round,
# then its median. Each row's requests come from a client address of its own (X-Forwarded-For
# from loopback, a trusted proxy), as different agents' would. The invalid row is one client
# flooding bad signatures: past the per-client budget (`failed_verifications_per_minute`, 60)
# they read `unverified` without a check, which is the point: what a flood costs, and that it
# costs the other clients' checks nothing. Results are appended to bench/results.md.
#
# Needs wrk, nginx, python3 with `cryptography` (Debian: python3-cryptography).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-5}
connections=${2:-16}
rounds=${3:-3}
for tool in wrk nginx; do
  command -v "$tool" >/dev/null || { echo "bench/crawl_load.sh needs $tool" >&2; exit 1; }
done
python3 -c 'import cryptography' 2>/dev/null || { echo "bench/crawl_load.sh needs python3's cryptography" >&2; exit 1; }

. bench/lib.sh
bench_scratch

origin_port=$(free_port); signpost_port=$(free_port); admin_port=$(free_port); dir_port=$(free_port)
head -c 2000 /dev/zero | tr '\0' 'x' | sed 's/^/<!doctype html><p>/' > "$work/www/page.html"
mkdir -p "$work/www/free" && cp "$work/www/page.html" "$work/www/free/page.html"
start_nginx "$origin_port" 'types { text/html html; }'

# The key directory: a certificate for localhost (an end-entity certificate the edge is told to
# trust), and the agent's key published as a JWKS.
mkdir -p "$work/dir/.well-known"
authority="localhost:$signpost_port"
agent="https://localhost:$dir_port"
python3 - "$work" "$authority" "$agent" <<'PY'
import base64, hashlib, json, os, sys, time
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives import serialization
work, authority, agent = sys.argv[1:]
b64u = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
import datetime
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
tls_key = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(tls_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(tls_key, hashes.SHA256()))
open(f"{work}/dir-cert.pem", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open(f"{work}/dir-key.pem", "wb").write(tls_key.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
key = Ed25519PrivateKey.generate()
x = b64u(key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
keyid = b64u(hashlib.sha256(json.dumps({"crv": "Ed25519", "kty": "OKP", "x": x}, separators=(",", ":")).encode()).digest())
with open(f"{work}/dir/.well-known/http-message-signatures-directory", "w") as f:
    json.dump({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": keyid}]}, f)
created = int(time.time()) - 5
member = f'"{agent}"'

def line(path, price, valid, client):
    nonce = b64u(os.urandom(16))
    components = '"@authority" "signature-agent";key="sig1"' + (' "crawler-exact-price"' if price else "")
    params = f'({components});created={created};expires={created + 3600};keyid="{keyid}";nonce="{nonce}";tag="web-bot-auth"'
    base = f'"@authority": {authority}\n"signature-agent";key="sig1": {member}\n'
    if price:
        base += f'"crawler-exact-price": {price}\n'
    base += f'"@signature-params": {params}'
    signed = base if valid else base + " "
    sig = base64.b64encode(key.sign(signed.encode())).decode()
    headers = [f"signature-agent: sig1={member}", f"signature-input: sig1={params}", f"signature: sig1=:{sig}:"]
    if price:
        headers.append(f"crawler-exact-price: {price}")
    ua = "user-agent: BenchBot/1.0" if valid else "user-agent: Mozilla/5.0 (X11; Linux x86_64)"
    return "\t".join([path, ua, f"x-forwarded-for: {client}"] + headers)

rows = {
    "nobot": ["\t".join(["/page.html", "user-agent: Mozilla/5.0 (X11; Linux x86_64)", "x-forwarded-for: 192.0.2.1"])],
    "verified": [line("/free/page.html", None, True, "192.0.2.2") for _ in range(20000)],
    "invalid": [line("/free/page.html", None, False, "192.0.2.3") for _ in range(20000)],
    "charged": [line("/page.html", "USD 0.01", True, "192.0.2.4") for _ in range(20000)],
}
for name, lines in rows.items():
    with open(f"{work}/{name}.tsv", "w") as f:
        f.write("\n".join(lines) + "\n")
PY
cat > "$work/dir.py" <<PY
import functools, http.server, ssl
class H(http.server.SimpleHTTPRequestHandler):
    def guess_type(self, path):
        return "application/http-message-signatures-directory+json"
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", $dir_port), functools.partial(H, directory="$work/dir"))
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("$work/dir-cert.pem", "$work/dir-key.pem")
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
PY
python3 "$work/dir.py" &
dir_pid=$!
# A background job of a script ignores SIGINT, which bench_cleanup sends: stop this one with TERM.
trap 'kill -TERM "$dir_pid" 2>/dev/null || true; bench_cleanup' EXIT
wait_port "$dir_port"

cat > "$work/rows.lua" <<'LUA'
local rows, i = {}, 0
for l in io.lines(os.getenv("ROWS")) do
  local fields = {}
  for f in l:gmatch("[^\t]+") do fields[#fields + 1] = f end
  local headers = {}
  for k = 2, #fields do
    local name, value = fields[k]:match("^([^:]+): (.*)$")
    headers[name] = value
  end
  rows[#rows + 1] = { path = fields[1], headers = headers }
end
request = function()
  i = i % #rows + 1
  local r = rows[i]
  return wrk.format("GET", r.path, r.headers)
end
-- The first answer that is not a 200, shown (from the thread that saw it): a row that is
-- refused measures refusals.
local shown = false
response = function(status, headers, body)
  if status ~= 200 and not shown then
    shown = true
    io.stderr:write(string.format("first non-200: %d crawler-error=%s %s\n", status, tostring(headers["crawler-error"]), body:sub(1, 200)))
  end
end
LUA

cargo build --release --locked -p signpost --bin signpost >/dev/null
target=$(target_dir)
cat > "$work/policy.toml" <<EOF
listen = ["127.0.0.1:$signpost_port"]
admin = "127.0.0.1:$admin_port"

[client_ip]
trusted_proxies = ["127.0.0.1"]

[bots]
allow_private_fetch = true
trusted_roots = ["$work/dir-cert.pem"]

[ledger]
dir = "$work/ledger"

[[bot]]
name = "BenchBot"
operator = "Bench"
category = "AI Crawler"
behaviors = ["training"]
user_agent = "BenchBot"
web_bot_auth = ["$agent"]

[[zone]]
name = "bench"
hosts = ["localhost"]
origin = "127.0.0.1:$origin_port"
[zone.crawl]
training = "charge"
price = "USD 0.01"
free_paths = ["/free/*"]
EOF
RUST_LOG=warn "$target/release/signpost" run --config "$work/policy.toml" --threads 1 2>"$work/signpost.log" &
pids+=($!)
wait_port "$signpost_port"

# The directory is fetched in the background: wait until a signed request verifies.
first=$(head -1 "$work/verified.tsv")
curl_args=()
IFS=$'\t' read -r -a fields <<<"$first"
for h in "${fields[@]:1}"; do curl_args+=(-H "$h"); done
verified_once=
for _ in $(seq 1 100); do
  curl -s -o /dev/null "${curl_args[@]}" "http://$authority/free/page.html"
  if curl -s "http://127.0.0.1:$admin_port/metrics" | grep -q 'signpost_signature_verifications_total{outcome="verified"'; then
    verified_once=1; break
  fi
  sleep 0.1
done
if [ -z "$verified_once" ]; then
  echo "the agent's signature never verified; the edge's log:" >&2
  tail -20 "$work/signpost.log" >&2
  curl -s "http://127.0.0.1:$admin_port/metrics" | grep -E 'key_directory|signature_verif' >&2
  exit 1
fi

# Each row's first request must succeed as intended (a verified, or a charged, 200), or the run
# would measure refusals.
for name in nobot verified invalid charged; do
  IFS=$'\t' read -r -a fields <<<"$(sed -n 2p "$work/$name.tsv" 2>/dev/null || head -1 "$work/$name.tsv")"
  [ "${#fields[@]}" -gt 0 ] || IFS=$'\t' read -r -a fields <<<"$(head -1 "$work/$name.tsv")"
  args=()
  for h in "${fields[@]:1}"; do args+=(-H "$h"); done
  status=$(curl -s -o "$work/check.body" -D "$work/check.head" -w '%{http_code}' "${args[@]}" "http://$authority${fields[0]}")
  if [ "$status" != 200 ] || { [ "$name" = charged ] && ! grep -qi '^crawler-charged: USD 0.01' "$work/check.head"; }; then
    echo "row $name: the request is answered $status, not as intended:" >&2
    cat "$work/check.head" "$work/check.body" >&2
    exit 1
  fi
done

raw="$work/rows"
row() { # round name file
  local round=$1 name=$2 out rps p50 p99 non2xx requests
  out=$(ROWS="$work/$3.tsv" "${wrk_prefix[@]}" wrk -t1 -c"$connections" -d"${seconds}s" --latency -s "$work/rows.lua" "http://$authority/")
  read -r rps p50 p99 non2xx requests <<<"$(awk '/Requests\/sec/ {rps=$2} $1=="50%" {p50=$2} $1=="99%" {p99=$2} /Non-2xx/ {n=$NF}
       / requests in / {req=$1}
       END {printf "%s %s %s %s %s\n", rps, p50, p99, (n == "" ? 0 : n), req}' <<<"$out")"
  echo "$round|$name|$rps $p50 $p99 $non2xx $requests" >>"$raw"
}
for round in $(seq 1 "$rounds"); do
  row "$round" "no bot (baseline)" nobot
  row "$round" "Web Bot Auth, verified (a new signature each request)" verified
  row "$round" "Web Bot Auth, invalid (one client's flood)" invalid
  row "$round" "pay per crawl, charged (a ledger record each request)" charged
done
metrics=$(curl -s "http://127.0.0.1:$admin_port/metrics")
charged_cents=$(awk '/^signpost_crawler_charged_cents_total\{crawler="BenchBot"\}/ {print $2}' <<<"$metrics")
records=$(cat "$work"/ledger/*.jsonl | wc -l)
verified=$(awk '/^signpost_signature_verifications_total\{outcome="verified"/ {s+=$2} END {print s+0}' <<<"$metrics")

{
  echo
  echo "### $(date -u +%Y-%m-%dT%H:%MZ), Web Bot Auth and pay per crawl, ${rounds} interleaved rounds, ${seconds}s per row, ${connections} connections, $(nproc) cores"
  echo
  echo "Command: \`bench/crawl_load.sh $seconds $connections $rounds\` (wrk -t1 with a Lua script cycling 20,000 distinct signatures per row; signpost --threads 1; nginx origin, 2 KB page; ledger: $records records, ${charged_cents:-0} cents, on $(df -T "$work" | awk 'NR==2 {print $2}'); $verified signatures verified)"
  echo
  rows_table "$raw" "request" "no bot"
} | tee -a bench/results.md

#!/usr/bin/env bash
# Memory per idle keep-alive connection: signpost, the bare Pingora proxy and nginx, in the same
# run, in front of the same nginx origin.
#
#   bench/idle_conns.sh [connections, default 250]
#
# For each server and kind of connection (plain HTTP/1.1; HTTP/1.1 over TLS; HTTP/2 over TLS),
# a fresh server process (one worker thread or process) is started, warmed up with a few
# connections of one request each, and then `connections` connections each make one request
# (GET of a 612-byte page, proxied to the origin) and stay open; the server's resident memory
# (VmRSS) grows by the figure reported, divided by the connections, which are counted among the
# server's established sockets first. Every connection then makes a second request, which must
# be answered (bench/idle_conns.py). 250 connections stay under signpost's default per-client
# cap (256), which this run lifts anyway. The bare Pingora proxy has plain HTTP/1.1 only (it has
# no TLS listener). Results are appended to bench/results.md with the command line.
#
# IDLE_BUILD=0 skips the cargo build (binaries already built in the target directory);
# IDLE_PROFILE=debug measures the debug binaries (what the end-to-end tests run) instead;
# IDLE_MODES (default "plain tls h2") and IDLE_SERVERS (default "nginx bare signpost") pick rows.
set -euo pipefail
cd "$(dirname "$0")/.."

count=${1:-250}
for tool in nginx openssl python3 ss; do
  command -v "$tool" >/dev/null || { echo "bench/idle_conns.sh needs $tool" >&2; exit 1; }
done
# Each connection is a descriptor in the client and in the server.
ulimit -n "$(( count * 2 + 256 > $(ulimit -n) ? count * 2 + 256 : $(ulimit -n) ))" 2>/dev/null || true

. bench/lib.sh
bench_scratch

profile=${IDLE_PROFILE:-release}
if [ "${IDLE_BUILD:-1}" != 0 ]; then
  cargo build --profile "${profile/debug/dev}" --locked -p signpost --bin signpost --example bare_proxy >/dev/null
fi
target=$(target_dir)/$profile

origin_port=$(free_port)
head -c 612 /dev/zero | tr '\0' 'x' > "$work/www/index.html"
start_nginx "$origin_port"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

# Runs one measurement: starts the server, measures, stops it. Prints bench/idle_conns.py's line.
measure() { # server mode
  local server=$1 mode=$2 port pid
  port=$(free_port)
  case $server in
    signpost)
      {
        echo 'admin = "off"'
        if [ "$mode" = plain ]; then
          echo "listen = [\"127.0.0.1:$port\"]"
        else
          printf '[[listener]]\naddr = "127.0.0.1:%s"\ntls = { cert = "%s", key = "%s" }\n' "$port" "$work/cert.pem" "$work/key.pem"
        fi
        printf '[connections]\nmax_per_client = 1000000\n'
        printf '[[zone]]\nname = "bench"\nhosts = ["localhost"]\norigin = "127.0.0.1:%s"\n' "$origin_port"
      } > "$work/signpost.toml"
      RUST_LOG=warn "$target/signpost" run --config "$work/signpost.toml" --threads 1 \
        --grace-period 0 2>>"$work/signpost.log" &
      pid=$! ;;
    bare)
      "$target/examples/bare_proxy" "127.0.0.1:$port" "127.0.0.1:$origin_port" 1 2>>"$work/bare.log" &
      pid=$! ;;
    nginx)
      local listen="listen 127.0.0.1:$port;"
      [ "$mode" = tls ] && listen="listen 127.0.0.1:$port ssl;"
      [ "$mode" = h2 ] && listen="listen 127.0.0.1:$port ssl http2;"
      mkdir -p "$work/nginx-proxy"
      cat > "$work/nginx-proxy/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx-proxy/nginx.pid;
error_log $work/nginx-proxy/error.log;
events { worker_connections $((count + 512)); }
http {
  access_log off;
  client_body_temp_path $work/tmp; proxy_temp_path $work/tmp; fastcgi_temp_path $work/tmp;
  uwsgi_temp_path $work/tmp; scgi_temp_path $work/tmp;
  upstream origin { server 127.0.0.1:$origin_port; keepalive 64; }
  server {
    $listen
    ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem;
    keepalive_requests 1000000; keepalive_timeout 300s;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGINX
      nginx -c "$work/nginx-proxy/nginx.conf"
      wait_port "$port"
      # nginx's one worker answers; its master only holds the configuration.
      pid=$(pgrep -P "$(cat "$work/nginx-proxy/nginx.pid")")
      ;;
  esac
  wait_port "$port" 1200   # a debug build on a loaded machine starts slowly
  python3 bench/idle_conns.py "$mode" "$port" "$pid" "$count"
  if [ "$server" = nginx ]; then
    kill "$(cat "$work/nginx-proxy/nginx.pid")"
    while [ -e "$work/nginx-proxy/nginx.pid" ]; do sleep 0.05; done
  else
    kill -INT "$pid"
    wait "$pid" 2>/dev/null || true
  fi
}

raw="$work/raw.txt"
: > "$raw"
for mode in ${IDLE_MODES:-plain tls h2}; do
  for server in ${IDLE_SERVERS:-nginx bare signpost}; do
    [ "$server" = bare ] && [ "$mode" != plain ] && continue
    echo "$server $(measure "$server" "$mode")" >> "$raw"
  done
done

{
  echo
  echo "### $(date -u +%Y-%m-%dT%H:%MZ): memory per idle keep-alive connection, $count connections"
  echo
  echo "Command: \`${IDLE_PROFILE:+IDLE_PROFILE=$IDLE_PROFILE }${IDLE_MODES:+IDLE_MODES="$IDLE_MODES" }${IDLE_SERVERS:+IDLE_SERVERS="$IDLE_SERVERS" }bench/idle_conns.sh $count\` (one request each, then idle; VmRSS of the answering process after minus before, over the connections; each server one worker)"
  echo
  echo "| server | connection | KiB per idle connection | RSS before / after (KiB) | established | answered a second request |"
  echo "|---|---|---|---|---|---|"
  while read -r server mode n before after per open answered; do
    case $mode in plain) kind="HTTP/1.1" ;; tls) kind="HTTP/1.1 over TLS" ;; h2) kind="HTTP/2 over TLS" ;; esac
    echo "| $server | $kind | **$per** | $before / $after | $open of $n | $answered of $n |"
  done < "$raw"
} | tee -a bench/results.md

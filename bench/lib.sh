# Shared by the bench scripts (sourced from the repository root).

# A loopback port nobody listens on right now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits until something accepts connections on loopback port $1, polling every 50 ms, at most
# $2 times (default 200: 10 s; callgrind's slow start-up needs more).
wait_port() {
  for _ in $(seq 1 "${2:-200}"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1" >&2; exit 1
}

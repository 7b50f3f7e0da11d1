#!/usr/bin/env python3
"""Memory per idle keep-alive connection of one server process (driven by bench/idle_conns.sh).

    idle_conns.py MODE PORT PID COUNT [HOST]

MODE is `plain` (HTTP/1.1), `tls` (HTTP/1.1 over TLS, ALPN http/1.1) or `h2` (HTTP/2 over TLS,
ALPN h2). PID is the process whose memory is read (nginx's worker, not its master). Warms the
server up with a few connections of one request each, closed, reads its VmRSS, opens COUNT
connections that each make one request (GET /index.html, read to the end of the answer) and stay
open, counts the server's established sockets on PORT (every connection must be open there), reads
VmRSS again, then makes a second request on every connection (every one must be answered) and
prints one line:

    MODE COUNT rss_before_kib rss_after_kib kib_per_connection established second_answers

The certificate is not verified (a self-signed one of the run).
"""

import socket
import ssl
import subprocess
import sys
import time

mode, port, pid, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
host = sys.argv[5] if len(sys.argv) > 5 else "localhost"

context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
context.set_alpn_protocols(["h2"] if mode == "h2" else ["http/1.1"])


def vm_rss_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")


def established():
    out = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( sport = :{port} )"],
        capture_output=True, text=True, check=True,
    ).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def connect():
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if mode == "plain":
        return sock
    sock = context.wrap_socket(sock, server_hostname=host)
    want = "h2" if mode == "h2" else "http/1.1"
    if sock.selected_alpn_protocol() != want:
        raise SystemExit(f"ALPN chose {sock.selected_alpn_protocol()!r}, not {want}")
    return sock


def read_exact(sock, n, buf):
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("the server closed a connection")
        buf += chunk
    return buf


# HTTP/1.1: one request and its whole answer (Content-Length or chunked).
def h1_request(sock):
    sock.sendall(f"GET /index.html HTTP/1.1\r\nHost: {host}\r\nUser-Agent: idle-conns\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf = read_exact(sock, len(buf) + 1, buf)
    head, rest = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if b"content-length" in fields:
        read_exact(sock, int(fields[b"content-length"]), rest)
    elif fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            rest += sock.recv(65536)
    return status


# HTTP/2: the preface and an empty SETTINGS once, then a GET per stream, read until the stream
# ends; the server's SETTINGS are acknowledged and its other frames skipped.
def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_literal(index, value):  # literal without indexing, name from the static table
    value = value.encode()
    return bytes([index]) + bytes([len(value)]) + value


def h2_request(sock, stream, first):
    # :method GET (2), :scheme https (7), :path (4), :authority (1).
    block = b"\x82\x87" + hpack_literal(4, "/index.html") + hpack_literal(1, host)
    out = b""
    if first:
        out += b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0)
    out += frame(0x1, 0x4 | 0x1, stream, block)
    sock.sendall(out)
    buf, status = b"", None
    while True:
        buf = read_exact(sock, 9, buf)
        length = int.from_bytes(buf[:3], "big")
        kind, flags, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        buf = read_exact(sock, 9 + length, buf)
        payload, buf = buf[9:9 + length], buf[9 + length:]
        if kind == 0x4 and not flags & 0x1:
            sock.sendall(frame(0x4, 0x1, 0))
        elif kind == 0x7:
            raise SystemExit(f"GOAWAY: {payload[4:8].hex()}")
        elif kind == 0x1 and sid == stream:
            # The status is the first field: indexed (0x88 = 200) or a literal with name index 8.
            status = 200 if payload[:1] == b"\x88" else -1
            if flags & 0x1:
                return status
        elif kind == 0x0 and sid == stream:
            if length:
                sock.sendall(frame(0x8, 0, 0, length.to_bytes(4, "big")))
            if flags & 0x1:
                return status


def request(sock, nth):
    if mode == "h2":
        return h2_request(sock, 2 * nth - 1, nth == 1)
    return h1_request(sock)


for _ in range(8):
    sock = connect()
    assert request(sock, 1) == 200
    sock.close()
time.sleep(0.5)
before = vm_rss_kib()

socks = []
for _ in range(count):
    sock = connect()
    status = request(sock, 1)
    if status != 200:
        raise SystemExit(f"first request answered {status}")
    socks.append(sock)

# Every answer was read; the server finishes each request (its log line, the return of the
# connection to its keep-alive wait) right after writing it.
deadline = time.monotonic() + 30
while (open_now := established()) < count and time.monotonic() < deadline:
    time.sleep(0.1)
time.sleep(0.5)
after = vm_rss_kib()

answered = sum(1 for sock in socks if request(sock, 2) == 200)
for sock in socks:
    sock.close()
print(mode, count, before, after, f"{(after - before) / count:.1f}", open_now, answered)

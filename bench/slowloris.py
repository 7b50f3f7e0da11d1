#!/usr/bin/env python3
"""Slowloris against a running signpost binary: latency of normal requests while many clients
trickle their headers, descriptors held, and whether every slow client is cut at the header
deadline. Standard library only; Linux (reads /proc).

    bench/slowloris.py [binary, default target/release/signpost] [slow clients, default 1000]
                       [seconds of normal requests, default 5]
"""

import http.client
import http.server
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: without this, Nagle and delayed ACKs add 40 ms.
    disable_nagle_algorithm = True

    def do_GET(self):
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/signpost"
    slow_count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    header_timeout = seconds + 5

    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    port, admin = free_port(), free_port()
    work = tempfile.mkdtemp()
    policy = os.path.join(work, "policy.toml")
    with open(policy, "w") as f:
        f.write(
            f'listen = ["127.0.0.1:{port}"]\nadmin = "127.0.0.1:{admin}"\n'
            f'[connections]\nheader_timeout = "{int(header_timeout)}s"\nmax_per_client = 1000000\n'
            f'[[zone]]\nname = "bench"\nhosts = ["*"]\n'
            f'origin = "127.0.0.1:{origin.server_address[1]}"\n'
        )
    env = dict(os.environ, RUST_LOG="warn")
    edge = subprocess.Popen([binary, "run", "--config", policy], env=env, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        before = descriptors(edge.pid)

        slow = []
        for _ in range(slow_count):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET / HTTP/1.1\r\nHost: example.com\r\nX-a: ")
            slow.append(s)
        opened = time.monotonic()
        stop = threading.Event()

        def trickle():
            while not stop.is_set():
                for s in slow:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
                stop.wait(1.0)

        threading.Thread(target=trickle, daemon=True).start()
        time.sleep(0.5)
        held = descriptors(edge.pid)

        latencies = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/ok", headers={"Host": "example.com"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, resp.status
            conn.close()
            latencies.append(time.perf_counter() - started)
        latencies.sort()
        p50 = latencies[len(latencies) // 2] * 1000
        p99 = latencies[max(0, -(-len(latencies) * 99 // 100) - 1)] * 1000

        cut = 0
        for s in slow:
            s.settimeout(max(0.1, header_timeout + 2 - (time.monotonic() - opened)))
            try:
                data = s.recv(64)
                while data and not data.startswith(b"HTTP/1.1 408"):
                    data = s.recv(64)
                if data.startswith(b"HTTP/1.1 408"):
                    cut += 1
            except OSError:
                pass
        cut_after = time.monotonic() - opened
        stop.set()
        for s in slow:
            s.close()
        time.sleep(0.5)
        after = descriptors(edge.pid)
        print(
            f"{slow_count} slow clients; {len(latencies)} normal requests in {seconds:.0f} s: "
            f"p50 {p50:.2f} ms, p99 {p99:.2f} ms; edge descriptors {before} before, {held} "
            f"while held, {after} after; {cut}/{slow_count} slow clients cut with 408 within "
            f"{cut_after:.1f} s (header_timeout {header_timeout:.0f} s)"
        )
    finally:
        edge.terminate()
        edge.wait()


if __name__ == "__main__":
    main()

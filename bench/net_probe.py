#!/usr/bin/env python3
"""TCP connect latency and a small web page for bench/net (standard library
only: it runs in the sandbox's guest, copied there with `sbx scp`, and in
level 1).

  net_probe.py serve ADDRESS PORT
      accepts connections and closes them at once, forever.
  net_probe.py connect ADDRESS PORT COUNT [TIMEOUT_S]
      COUNT connects one after another, each timed from connect() until
      it returns (the SYN / SYN-ACK round trip through whatever lies
      between), then closed; prints one line
      "connects=N failed=F median_ms=... p95_ms=... min_ms=... max_ms=...".
      Exits 1 when no connect succeeded.
  net_probe.py http ADDRESS PORT
      HTTP/1.1 with keep-alive, a thread per connection: every GET is
      answered "hello from bench/net" in one write (headers and body
      together, TCP_NODELAY), so no answer waits on Nagle's algorithm and
      the peer's delayed ACK (RFC 1122 4.2.3.2, 4.2.3.4).
"""
import socket
import socketserver
import statistics
import sys
import time

PAGE = b"hello from bench/net\n"
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(PAGE)) + PAGE


class Page(socketserver.BaseRequestHandler):
    def handle(self):
        conn = self.request
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pending = b""
        while True:
            while b"\r\n\r\n" not in pending:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                pending += chunk
            head, _, pending = pending.partition(b"\r\n\r\n")
            close = b"\nconnection: close" in head.lower()
            conn.sendall(ANSWER)
            if close:
                return


class PageServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512


def serve(address, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port))
    s.listen(512)
    while True:
        conn, _ = s.accept()
        conn.close()


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def connect(address, port, count, timeout):
    times, failed = [], 0
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout)
        t0 = time.perf_counter()
        try:
            s.connect((address, port))
            times.append((time.perf_counter() - t0) * 1000)
        except OSError:
            failed += 1
        finally:
            s.close()
    if not times:
        print(f"connects=0 failed={failed}")
        return 1
    print(f"connects={len(times)} failed={failed} median_ms={statistics.median(times):.3f} "
          f"p95_ms={percentile(times, 95):.3f} min_ms={min(times):.3f} max_ms={max(times):.3f}")
    return 0


def main(argv):
    if len(argv) == 3 and argv[0] == "serve":
        serve(argv[1], int(argv[2]))
        return 0
    if len(argv) == 3 and argv[0] == "http":
        PageServer((argv[1], int(argv[2])), Page).serve_forever()
        return 0
    if len(argv) in (4, 5) and argv[0] == "connect":
        return connect(argv[1], int(argv[2]), int(argv[3]), float(argv[4]) if len(argv) == 5 else 10.0)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Level-1 side of bench/agent: exec round-trip latency of `true` through
sbx-agent, speaking the protocol (docs/agent-protocol.md) directly on the
VMM's hybrid vsock socket, so no process start is measured.

  fresh:  each run opens a connection (CONNECT 52), sends the hello, execs
  reused: one authenticated connection, one exec after the other

Prints "BENCH-EXEC: <mode> n=<N> median_ms=<x> p99_ms=<y> min_ms=<z>".
Usage: agent_runner.py UDS TOKEN [RUNS]
"""

import os
import socket
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "guest"))
from agent_frames import recv_message, send_frame  # noqa: E402  (the path is set just above)


def connect(uds, token):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    sock.connect(uds)
    sock.sendall(b"CONNECT 52\n")
    line = b""
    while not line.endswith(b"\n"):
        c = sock.recv(1)
        if not c:
            raise ConnectionError("closed during CONNECT")
        line += c
    if not line.startswith(b"OK"):
        raise ConnectionError(f"CONNECT answered {line!r}")
    send_frame(sock, {"type": "hello", "version": 1, "token": token})
    hello = recv_message(sock)
    if hello.get("type") != "hello":
        raise ConnectionError(f"hello answered {hello}")
    return sock


def exec_true(sock):
    send_frame(sock, {"type": "request", "op": "exec", "argv": ["true"]})
    while True:
        m = recv_message(sock)
        if m.get("type") == "exit":
            if m.get("code") != 0:
                raise RuntimeError(f"true exited {m}")
            return
        if m.get("type") == "error":
            raise RuntimeError(f"exec failed: {m}")


def report(mode, samples):
    s = sorted(samples)
    n = len(s)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    p99 = s[min(n - 1, int(round(0.99 * n + 0.5)) - 1)]
    print(f"BENCH-EXEC: {mode} n={n} median_ms={median * 1000:.2f} p99_ms={p99 * 1000:.2f} "
          f"min_ms={s[0] * 1000:.2f}", flush=True)


def main():
    uds, token = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    # Warm-up: page cache, the agent's first fork.
    with connect(uds, token) as sock:
        for _ in range(5):
            exec_true(sock)
    fresh = []
    for _ in range(runs):
        t = time.perf_counter()
        with connect(uds, token) as sock:
            exec_true(sock)
        fresh.append(time.perf_counter() - t)
    report("fresh", fresh)
    reused = []
    with connect(uds, token) as sock:
        for _ in range(runs):
            t = time.perf_counter()
            exec_true(sock)
            reused.append(time.perf_counter() - t)
    report("reused", reused)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Sends one request to sbx-vmm's control socket and prints the reply.

Usage: vmm_control.py SOCKET '{"op": "status"}'
Exit status 0 when the reply says "ok": true, 1 otherwise (the reply is
printed either way), 2 when the socket cannot be reached.
"""
import json
import socket
import sys


def request(path, message):
    """Sends one request (a dict) to the control socket at PATH; returns the reply (a dict)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall(json.dumps(message).encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    return json.loads(reply or b"{}")


def main() -> int:
    path, message = sys.argv[1], json.loads(sys.argv[2])
    try:
        reply = request(path, message)
    except OSError as e:
        print(f"cannot reach {path}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(reply, separators=(",", ":")))
    return 0 if reply.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())

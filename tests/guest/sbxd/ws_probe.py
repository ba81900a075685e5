#!/usr/bin/env python3
"""A WebSocket client (RFC 6455) over TLS, for the hosted-ports test: it
connects to 127.0.0.1:PORT with SNI and Host HOSTNAME, does the handshake
with the given header, sends each MESSAGE as a masked text frame and prints
each echo, then closes. Standard library only (Debian's python3 has no
websockets module). Exit status 1 on any failure, with the reason.

Usage: ws_probe.py CAFILE HOSTNAME PORT HEADER MESSAGE...
"""
import base64
import os
import socket
import ssl
import struct
import sys


def frame(opcode, payload):
    mask = os.urandom(4)
    head = bytes([0x80 | opcode])
    n = len(payload)
    head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("the connection ended")
        data += chunk
    return data


def main():
    cafile, hostname, port, header = sys.argv[1:5]
    context = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", int(port)), timeout=60) as raw:
        with context.wrap_socket(raw, server_hostname=hostname) as sock:
            key = base64.b64encode(os.urandom(16)).decode()
            request = ("GET /ws HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n\r\n") % (hostname, port, key, header)
            sock.sendall(request.encode())
            response = b""
            while b"\r\n\r\n" not in response:
                response += read_exact(sock, 1)
            status = response.split(b"\r\n")[0].decode()
            if " 101 " not in status + " ":
                print("handshake: %s" % status)
                return 1
            for message in sys.argv[5:]:
                sock.sendall(frame(1, message.encode()))
                head = read_exact(sock, 2)
                n = head[1] & 0x7F
                if n == 126:
                    n = struct.unpack("!H", read_exact(sock, 2))[0]
                print(read_exact(sock, n).decode())
            sock.sendall(frame(8, b""))
            return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as error:  # a failed probe says why, on stdout for the check
        print("ws_probe: %s" % error)
        sys.exit(1)

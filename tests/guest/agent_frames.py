"""The agent protocol's frames (docs/agent-protocol.md, "Frames") for the
Python test and bench drivers: just enough to say hello, send a request
and read replies."""

import json
import struct

MAX_FRAME = (1 << 20) + 1  # kind byte + a 1 MiB body


def send_frame(sock, message):
    """One JSON frame."""
    body = b"\x01" + json.dumps(message).encode()
    sock.sendall(struct.pack("<I", len(body)) + body)


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv_frame(sock):
    """(kind, body) of the next frame."""
    (length,) = struct.unpack("<I", recv_exact(sock, 4))
    if not 1 <= length <= MAX_FRAME:
        raise ConnectionError(f"bad frame length {length}")
    body = recv_exact(sock, length)
    return body[0], body[1:]


def recv_message(sock):
    """The next JSON message, skipping data and EOF frames."""
    while True:
        kind, body = recv_frame(sock)
        if kind == 1:
            return json.loads(body)

#!/usr/bin/env python3
"""The app a hosted-ports test serves from inside a sandbox (tests/guest/sbxd/hosted.sh).

Usage: hosted_app.py HOST PORT. HTTP/1.1 with keep-alive, standard library only:
  GET /          "hello from PORT"
  GET /pid       this process's pid (a wake must find the same process)
  GET /headers   the request's headers as JSON
  GET /sse       text/event-stream: "one", then 3 s later "two", then the end
  POST /upload   {"bytes": N, "sha256": ...} of the body, read as it comes
  GET /ws        a WebSocket (RFC 6455) echoing text messages until a close
"""
import base64
import hashlib
import http.server
import json
import os
import struct
import sys
import time

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def reply(self, status, body, content_type="text/plain"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/":
            self.reply(200, "hello from %d" % self.server.server_port)
        elif self.path == "/pid":
            self.reply(200, str(os.getpid()))
        elif self.path == "/headers":
            self.reply(200, json.dumps({k.lower(): v for k, v in self.headers.items()}), "application/json")
        elif self.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for i, word in enumerate(["one", "two"]):
                if i:
                    time.sleep(3)
                self.wfile.write(("data: %s\n\n" % word).encode())
                self.wfile.flush()
            self.close_connection = True
        elif self.path == "/ws":
            self.websocket()
        else:
            self.reply(404, "no such page")

    def do_POST(self):
        if self.path != "/upload":
            self.reply(404, "no such page")
            return
        digest, count = hashlib.sha256(), 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunk = self.rfile.read(size)
                self.rfile.readline()
                digest.update(chunk)
                count += len(chunk)
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                digest.update(chunk)
                count += len(chunk)
                left -= len(chunk)
        self.reply(200, json.dumps({"bytes": count, "sha256": digest.hexdigest()}), "application/json")

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            self.reply(400, "not a WebSocket handshake")
            return
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                break
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack("!H", self.rfile.read(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(length)))
            if opcode == 8:  # close: answer it (§5.5.1) and end
                self.wfile.write(b"\x88\x00")
                self.wfile.flush()
                break
            if opcode == 1:
                reply = b"echo: " + payload
                self.wfile.write(bytes([0x81, len(reply)]) + reply if len(reply) < 126 else
                                 bytes([0x81, 126]) + struct.pack("!H", len(reply)) + reply)
                self.wfile.flush()
        self.close_connection = True


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


if __name__ == "__main__":
    Server((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()

#!/usr/bin/env python3
"""The app behind the proxy in proxy_test.cpp: a threaded HTTP/1.1 server
on 127.0.0.1 (the port goes to the file named by argv[1]).

  GET  /headers    the request's path and headers as JSON, and which
                   connection it came on (to see reuse)
  POST /upload     counts the body's bytes (Content-Length or chunked)
  GET  /sse        text/event-stream, chunked: one event now, then one a
                   minute, never ending
  GET  /close      a body that ends when the server closes (no length)
  GET  /slow       answers after 5 s
  GET  /bad        a response that is not HTTP
  GET  /ws         a WebSocket (RFC 6455) that echoes every message
"""
import base64
import hashlib
import http.server
import json
import socketserver
import struct
import sys
import threading
import time

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send_json(self, value):
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/headers":
            self.send_json({"path": self.path,
                            "connection": "%s:%d" % self.client_address,
                            "headers": [[k, v] for k, v in self.headers.items()]})
        elif path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            n = 0
            try:
                while True:
                    event = ("id: %d\ndata: event %d\n\n" % (n, n)).encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                    n += 1
                    time.sleep(60)
            except OSError:
                return
        elif path == "/close":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until the end")
            self.close_connection = True
        elif path == "/slow":
            time.sleep(5)
            self.send_json({"slow": True})
        elif path == "/bad":
            self.wfile.write(b"THIS IS NOT HTTP\r\n\r\n")
            self.close_connection = True
        elif path == "/ws":
            self.websocket()
        else:
            self.send_error(404)

    def do_POST(self):
        count = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                left = size
                while left:
                    got = len(self.rfile.read(min(left, 1 << 20)))
                    if not got:
                        return
                    left -= got
                self.rfile.readline()
                count += size
                chunks += 1
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                got = len(self.rfile.read(min(left, 1 << 20)))
                if not got:
                    return
                left -= got
                count += got
        self.send_json({"bytes": count})

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        while True:
            frame = self.read_frame()
            if frame is None:
                return
            fin_opcode, payload = frame
            opcode = fin_opcode & 0x0F
            if opcode == 0x9:  # ping → pong (§5.5.2)
                self.send_frame(0x8A, payload)
                continue
            self.send_frame(fin_opcode, payload)
            if opcode == 0x8:  # close (§5.5.1): echoed, then the end
                return

    def read_exact(self, n):
        data = b""
        while len(data) < n:
            got = self.rfile.read(n - len(data))
            if not got:
                return None
            data += got
        return data

    def read_frame(self):
        # §5.2: FIN/opcode, MASK/length (7, 16 or 64 bits), mask key, payload.
        head = self.read_exact(2)
        if head is None:
            return None
        length = head[1] & 0x7F
        if length == 126:
            length = struct.unpack("!H", self.read_exact(2))[0]
        elif length == 127:
            length = struct.unpack("!Q", self.read_exact(8))[0]
        mask = self.read_exact(4) if head[1] & 0x80 else b"\0\0\0\0"
        payload = self.read_exact(length)
        if payload is None:
            return None
        return head[0], bytes(b ^ mask[i % 4] for i, b in enumerate(payload))

    def send_frame(self, fin_opcode, payload):
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", fin_opcode, n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", fin_opcode, 126, n)
        else:
            head = struct.pack("!BBQ", fin_opcode, 127, n)
        self.wfile.write(head + payload)
        self.wfile.flush()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    server = Server(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # Ends when the test closes stdin (or dies).
    sys.stdin.read()


if __name__ == "__main__":
    main()

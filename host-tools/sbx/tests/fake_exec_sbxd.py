#!/usr/bin/env python3
"""A stand-in for sbxd's exec, process and file routes
(/work/helpers/exec-api.md) on a Unix socket, for stream_test.sh: sbxd
has no exec routes yet, and this lets the real sbx's streaming paths
(chunked NDJSON cut anywhere, SSE from an offset, uploads and downloads
of any size, streams that break) be checked against the wire format.
Every request body is logged as JSON to LOG.  Usage: SOCKET LOG DIR"""
import base64, hashlib, http.server, json, os, socketserver, sys, time, urllib.parse

SOCK, LOG, FILES = sys.argv[1], sys.argv[2], sys.argv[3]
OUTPUT = bytes(range(256)) * 40 + b"the end\n"  # a detached process's output
PREFIX = "/v1/sandboxes/sbx_fake"


def b64(data):
    return base64.b64encode(data).decode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Request-Id", "req_fake")
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, code, message):
        self.reply(status, {"ok": False, "status": status, "code": code, "message": message, "requestId": "req_fake"})

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def start_chunked(self, content_type):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def route(self):
        url = urllib.parse.urlsplit(self.path)
        return url.path, dict(urllib.parse.parse_qsl(url.query))

    def do_POST(self):
        path, _ = self.route()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with open(LOG, "a") as log:
            log.write(json.dumps(body) + "\n")
        if path != PREFIX + "/exec":
            return self.error(404, "not_found", "no route")
        if body.get("detach"):
            return self.reply(201, {"ok": True, "process": {"id": "proc_1", "pid": 42}})
        what = body["command"][0]
        self.start_chunked("application/x-ndjson")
        events = [{"type": "start", "process": None, "pid": 7}]
        if what == "echo-stdin":
            stdin = base64.b64decode(body.get("stdin", ""))
            events += [{"type": "stdout", "data": b64(stdin)}, {"type": "stderr", "data": b64(b"err\n")},
                       {"type": "stdout", "data": b64(b"\x00binary\xff")}, {"type": "exit", "exitCode": 7}]
        elif what == "signal":
            events += [{"type": "exit", "exitCode": None, "signal": 9}]
        elif what == "timeout":
            events += [{"type": "exit", "exitCode": None, "timedOut": True}]
        elif what == "fail":
            events += [{"type": "error", "code": "agent_lost", "message": "the agent went away"}]
        elif what == "cut":
            events += [{"type": "stdout", "data": b64(b"partial\n")}]
        # One stream cut at odd places: lines span chunks, chunks hold several lines.
        stream = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        for i in range(0, len(stream), 13):
            self.chunk(stream[i:i + 13])
            time.sleep(0.001)
        if what == "cut":
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self):
        path, query = self.route()
        if path == PREFIX + "/processes/proc_1":
            return self.reply(200, {"ok": True, "process": {"id": "proc_1", "pid": 42, "command": ["job", "a b"],
                                    "running": False, "exitCode": 3, "signal": None,
                                    "outputBytes": len(OUTPUT), "tail": b64(OUTPUT[-16:])}})
        if path == PREFIX + "/processes/proc_1/output":
            offset = int(query.get("offset", self.headers.get("Last-Event-ID", "0")))
            self.start_chunked("text/event-stream")
            for at in range(offset, len(OUTPUT), 1000):
                piece = OUTPUT[at:at + 1000]
                self.chunk(b"id: %d\nevent: output\ndata: %s\n\n" % (at + len(piece), b64(piece).encode()))
                if offset == 2:
                    time.sleep(30)  # a slow process: the reader stops it (stream_test.sh)
            if query.get("cut") is None and offset != 1:
                self.chunk(b'event: exit\ndata: {"exitCode":3,"signal":null}\n\n')
            else:
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
            return
        if path == PREFIX + "/files/stat":
            if query["path"] == "/root":
                return self.reply(200, {"ok": True, "stat": {"path": "/root", "type": "dir"}})
            return self.error(404, "not_found", "no such file")
        if path == PREFIX + "/files":
            name = os.path.join(FILES, hashlib.sha256(query["path"].encode()).hexdigest())
            if not os.path.exists(name):
                return self.error(404, "not_found", "no such file " + query["path"])
            size = os.path.getsize(name)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(name, "rb") as f:
                sent = 0
                while chunk := f.read(65536):
                    if query["path"].endswith("/cut") and sent > size // 2:
                        self.close_connection = True
                        return
                    self.wfile.write(chunk)
                    sent += len(chunk)
            return
        self.error(404, "not_found", "no route")

    def do_PUT(self):
        path, query = self.route()
        if path != PREFIX + "/files":
            return self.error(404, "not_found", "no route")
        left = int(self.headers["Content-Length"])
        name = os.path.join(FILES, hashlib.sha256(query["path"].encode()).hexdigest())
        with open(name, "wb") as f:
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    break
                f.write(chunk)
                left -= len(chunk)
        with open(LOG, "a") as log:
            log.write(json.dumps({"put": query}) + "\n")
        self.reply(200, {"ok": True, "bytes": os.path.getsize(name)})


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # sbx closes as soon as it has what it needs (the exit event
        # before the last chunk); anything else is a bug here.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


if os.path.exists(SOCK):
    os.unlink(SOCK)
with Server(SOCK, Handler) as server:
    server.serve_forever()

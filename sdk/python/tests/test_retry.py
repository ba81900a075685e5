"""The retry policy, hosts, headers and mid-stream errors, against a tiny local http.server."""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import tempfile
import threading
import time
import unittest
from typing import Any

import sandboxer
from sandboxer import Host


class Script:
    """Answers each request with the next scripted (status, headers, body); records requests."""

    def __init__(self, answers: list[tuple[int, dict[str, str], Any]]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def next(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            self.requests.append({"method": method, "path": path, "headers": dict(headers),
                                  "body": body, "at": time.monotonic()})
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def handler_for(script: Script) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, headers, payload = script.next(self.command, self.path, self.headers, body)
            if isinstance(payload, (dict, list)):
                raw = json.dumps(payload).encode()
            else:
                raw = payload if isinstance(payload, bytes) else str(payload).encode()
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("X-Request-Id", "req_0123")
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = do_DELETE = _any

    return Handler


def error(status: int, code: str, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "status": status, "code": code, "message": f"{code} here", "requestId": "req_0123", **extra}


SANDBOX = {"id": "sbx_0123456789abcdef", "state": "running", "labels": {"a": "b"}}


def serve(test: unittest.TestCase,
          answers: list[tuple[int, dict[str, str], Any]]) -> tuple[Script, sandboxer.Sandboxer]:
    """A local server answering ``answers`` for the test's length, and a client of it over TCP."""
    script = Script(answers)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(script))
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    test.addCleanup(server.server_close)
    test.addCleanup(server.shutdown)
    client = sandboxer.Sandboxer(f"http://127.0.0.1:{server.server_address[1]}", api_key="sbxk_test",
                                 backoff=0.05, max_retries=3, timeout=10)
    return script, client


class TcpServerTest(unittest.TestCase):
    def serve(self, answers: list[tuple[int, dict[str, str], Any]]) -> tuple[Script, sandboxer.Sandboxer]:
        return serve(self, answers)

    def test_429_retry_after_then_created_same_key(self) -> None:
        script, client = self.serve([
            (429, {"Retry-After": "1"}, error(429, "rate_limited", retryAfterSeconds=1)),
            (201, {}, {"ok": True, "sandbox": SANDBOX, "replayed": False, "warnings": ["w"]}),
        ])
        started = time.monotonic()
        sb = client.create(size="small", labels={"a": "b"}, memory_mib=1024, from_="default", ttl=3600)
        self.assertGreaterEqual(time.monotonic() - started, 1.0)
        self.assertEqual(sb.id, SANDBOX["id"])
        self.assertEqual(sb.warnings, ["w"])
        self.assertEqual(len(script.requests), 2)
        keys = [r["headers"].get("Idempotency-Key") for r in script.requests]
        self.assertIsNotNone(keys[0])
        self.assertEqual(keys[0], keys[1])
        self.assertGreaterEqual(script.requests[1]["at"] - script.requests[0]["at"], 1.0)
        self.assertEqual(script.requests[0]["headers"].get("Authorization"), "Bearer sbxk_test")
        body = json.loads(script.requests[0]["body"])
        self.assertEqual(body, {"size": "small", "memoryMib": 1024, "from": "default",
                                "labels": {"a": "b"}, "ttl": "3600s"})
        self.assertEqual(script.requests[0]["body"], script.requests[1]["body"])

    def test_two_creates_get_two_keys(self) -> None:
        script, client = self.serve([(201, {}, {"ok": True, "sandbox": SANDBOX})])
        client.create()
        client.create(idempotency_key="mine")
        keys = [r["headers"].get("Idempotency-Key") for r in script.requests]
        self.assertNotEqual(keys[0], keys[1])
        self.assertEqual(keys[1], "mine")

    def test_503_then_200(self) -> None:
        script, client = self.serve([
            (503, {}, error(503, "capacity_exceeded")),
            (200, {}, {"ok": True, "sandbox": SANDBOX}),
        ])
        self.assertEqual(client.get(SANDBOX["id"]).state, "running")
        self.assertEqual(len(script.requests), 2)

    def test_fork_retried_with_one_key(self) -> None:
        script, client = self.serve([
            (502, {}, error(502, "no_ready_machine")),
            (201, {}, {"ok": True, "sandboxes": [SANDBOX, SANDBOX], "replayed": False}),
        ])
        parent = sandboxer.Sandbox(client, SANDBOX)
        children = parent.fork(count=2, memory=False)
        self.assertEqual(len(children), 2)
        self.assertEqual(len(script.requests), 2)
        keys = {r["headers"].get("Idempotency-Key") for r in script.requests}
        self.assertEqual(len(keys), 1)
        self.assertEqual(json.loads(script.requests[0]["body"]), {"count": 2, "memory": False})

    def test_400_not_retried(self) -> None:
        script, client = self.serve([(400, {}, error(400, "invalid_argument"))])
        with self.assertRaises(sandboxer.InvalidArgument) as cm:
            client.create(cpus=999)
        self.assertEqual(len(script.requests), 1)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.request_id), (400, "invalid_argument", "req_0123"))
        self.assertIsInstance(e, sandboxer.SandboxerError)

    def test_404_409_not_retried(self) -> None:
        script, client = self.serve([(404, {}, error(404, "not_found"))])
        with self.assertRaises(sandboxer.NotFound):
            client.get("sbx_nope")
        self.assertEqual(len(script.requests), 1)

    def test_post_without_key_not_resent(self) -> None:
        script, client = self.serve([(503, {}, error(503, "capacity_exceeded"))])
        with self.assertRaises(sandboxer.CapacityExceeded):
            sandboxer.Sandbox(client, SANDBOX).resume()
        with self.assertRaises(sandboxer.CapacityExceeded):
            sandboxer.Sandbox(client, SANDBOX).exec("true")
        self.assertEqual(len(script.requests), 2)

    def test_retries_run_out(self) -> None:
        script, client = self.serve([(500, {}, error(500, "internal"))])
        with self.assertRaises(sandboxer.InternalError):
            client.list()
        self.assertEqual(len(script.requests), 4)  # max_retries=3

    def test_501_not_retried(self) -> None:
        script, client = self.serve([(501, {}, error(501, "not_implemented"))])
        with self.assertRaises(sandboxer.Unimplemented):
            client.create()
        self.assertEqual(len(script.requests), 1)

    def test_long_retry_after_raises_at_once(self) -> None:
        script, client = self.serve([(429, {"Retry-After": "500"}, error(429, "rate_limited", retryAfterSeconds=500))])
        started = time.monotonic()
        with self.assertRaises(sandboxer.RateLimited) as cm:
            client.create()
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertEqual(cm.exception.retry_after, 500)
        self.assertEqual(len(script.requests), 1)

    def test_error_without_json_body(self) -> None:
        script, client = self.serve([(502, {}, b"<html>bad gateway</html>")])
        client.retry.max_retries = 0
        with self.assertRaises(sandboxer.AgentUnavailable) as cm:
            client.health()
        self.assertEqual(cm.exception.status, 502)

    def test_exec_stream_error_is_typed(self) -> None:
        lines = (b'{"type":"start","pid":5}\n{"type":"stdout","data":"aGkK"}\n'
                 b'{"type":"error","code":"agent_unavailable","message":"agent went away"}\n')
        script, client = self.serve([(200, {"Content-Type": "application/x-ndjson"}, lines)])
        events = []
        with self.assertRaises(sandboxer.AgentUnavailable):
            for ev in sandboxer.Sandbox(client, SANDBOX).exec_stream(["x"]):
                events.append(ev)
        self.assertEqual([e.type for e in events], ["start", "stdout"])
        self.assertEqual(events[1].data, b"hi\n")

    def test_exec_stream_cut_short(self) -> None:
        script, client = self.serve([(200, {}, b'{"type":"start","pid":5}\n')])
        with self.assertRaises(sandboxer.SandboxerConnectionError):
            sandboxer.Sandbox(client, SANDBOX).exec(["x"])

    def test_sse_error_event(self) -> None:
        sse = b'id: 3\nevent: output\ndata: aGkK\n\nevent: error\ndata: {"code":"agent_unavailable","message":"gone"}\n\n'
        script, client = self.serve([(200, {"Content-Type": "text/event-stream"}, sse)])
        proc = sandboxer.Sandbox(client, SANDBOX).process("p1")
        chunks = []
        with self.assertRaises(sandboxer.AgentUnavailable):
            for c in proc.attach(reconnect=0):
                chunks.append(c)
        self.assertEqual([(c.offset, c.end, c.data) for c in chunks], [(0, 3, b"hi\n")])

    def test_attach_reconnects_from_its_offset(self) -> None:
        script, client = self.serve([
            (200, {}, b"id: 3\nevent: output\ndata: aGkK\n\n"),  # the connection ends here, no exit
            (200, {}, b'id: 6\nevent: output\ndata: aG8K\n\nevent: exit\ndata: {"exitCode":0,"signal":null}\n\n'),
        ])
        proc = sandboxer.Sandbox(client, SANDBOX).process("p1")
        stream = proc.attach(offset=0)
        self.assertEqual([(c.offset, c.end, c.data) for c in stream], [(0, 3, b"hi\n"), (3, 6, b"ho\n")])
        self.assertEqual((stream.exit and stream.exit.exit_code, stream.offset), (0, 6))
        self.assertEqual([r["path"] for r in script.requests],
                         [f"/v1/sandboxes/{SANDBOX['id']}/processes/p1/output?offset=0",
                          f"/v1/sandboxes/{SANDBOX['id']}/processes/p1/output?offset=3"])

    def test_context_manager_deletes(self) -> None:
        script, client = self.serve([
            (201, {}, {"ok": True, "sandbox": SANDBOX, "replayed": False}),
            (200, {}, {"ok": True, "deleted": [SANDBOX["id"]]}),
        ])
        with sandboxer.Sandbox.create(client=client, cpus=1, memory_mib=1024, egress=["203.0.113.0/24"],
                                      no_auto_stop=True) as sb:
            self.assertEqual(sb.id, SANDBOX["id"])
        self.assertEqual([(r["method"], r["path"]) for r in script.requests],
                         [("POST", "/v1/sandboxes"), ("DELETE", f"/v1/sandboxes/{SANDBOX['id']}")])
        self.assertEqual(json.loads(script.requests[0]["body"]),
                         {"cpus": 1, "memoryMib": 1024, "noAutoStop": True, "egress": "allow-list",
                          "egressAllow": ["203.0.113.0/24"]})

    def test_local_read_error_is_not_a_connection_error(self) -> None:
        class Broken:
            def read(self, n: int = -1) -> bytes:
                raise ValueError("disk on fire")

        script, client = self.serve([(200, {}, {"ok": True, "bytes": 0})])
        with self.assertRaises(ValueError):
            sandboxer.Sandbox(client, SANDBOX).files.write("/x", Broken())  # type: ignore[arg-type]
        with self.assertRaises(NotADirectoryError):
            sandboxer.Sandbox(client, SANDBOX).files.upload_dir("/nonexistent/dir", "/x")

    def test_query_encoding(self) -> None:
        script, client = self.serve([(200, {}, {"ok": True, "sandboxes": [SANDBOX]})])
        found = client.find(labels={"owner": "a b", "team": "x/y"}, state=["running", "paused"])
        self.assertEqual(found and found.id, SANDBOX["id"])
        self.assertEqual(script.requests[0]["path"],
                         "/v1/sandboxes?labels=owner%3Da%20b%2Cteam%3Dx/y&state=running%2Cpaused")


class UnixServerTest(unittest.TestCase):
    def test_unix_socket_sends_no_key(self) -> None:
        script = Script([(200, {}, {"ok": True, "host": "t"})])

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        class Handler(handler_for(script)):  # type: ignore[misc]
            def address_string(self) -> str:
                return "unix"

        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "s.sock")
        server = Server(path, Handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        client = sandboxer.Sandboxer(f"unix:{path}", api_key="sbxk_secret")
        self.assertEqual(client.health()["host"], "t")
        self.assertNotIn("Authorization", script.requests[0]["headers"])

    def test_connection_refused(self) -> None:
        client = sandboxer.Sandboxer("unix:/nonexistent/sbxd.sock", max_retries=2, backoff=0.01)
        with self.assertRaises(sandboxer.SandboxerConnectionError) as cm:
            client.health()
        self.assertIsInstance(cm.exception, sandboxer.SandboxerError)
        self.assertIsInstance(cm.exception, ConnectionError)


class HostTest(unittest.TestCase):
    def test_parse(self) -> None:
        self.assertEqual(Host.parse("unix:/run/sandboxer/sbxd.sock"), Host("unix", "/run/sandboxer/sbxd.sock"))
        self.assertEqual(Host.parse("http://127.0.0.1:7070"), Host("http", "127.0.0.1", 7070))
        self.assertEqual(Host.parse("http://[::1]:7070"), Host("http", "::1", 7070))
        self.assertEqual(str(Host.parse("http://[::1]:7070")), "http://[::1]:7070")
        for bad in ("ftp://x", "unix:", "127.0.0.1:7070", "http://h:1/path"):
            with self.assertRaises(ValueError, msg=bad):
                Host.parse(bad)

    def test_defaults_from_environment(self) -> None:
        saved = {k: os.environ.pop(k, None) for k in ("SBX_HOST", "SBX_API_KEY", "SANDBOXER_API_URL",
                                                     "SANDBOXER_TOKEN")}
        try:
            self.assertEqual(str(sandboxer.Sandboxer().host), "unix:/run/sandboxer/sbxd.sock")
            os.environ.update(SANDBOXER_API_URL="http://127.0.0.1:7070", SANDBOXER_TOKEN="tok")
            c = sandboxer.Sandboxer()
            self.assertEqual((str(c.host), c.api_key), ("http://127.0.0.1:7070", "tok"))
            os.environ.update(SBX_HOST="http://10.0.0.1:80", SBX_API_KEY="k")
            c = sandboxer.Sandboxer()
            self.assertEqual((str(c.host), c.api_key), ("http://10.0.0.1:80", "k"))
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v


if __name__ == "__main__":
    unittest.main()

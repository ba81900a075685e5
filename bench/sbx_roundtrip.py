"""The round-trip rows of bench/sbx (issue 15): one `true` run in a running
sandbox through each door a program has, CALLS times on one sandbox, with
the client already set up where it keeps one (a process, a session):

- cli: `sbx exec ID -- true`, a new sbx process each time (as a script does);
- api: POST /v1/sandboxes/ID/exec over sbxd's Unix socket (http.client);
- mcp_stdio: the `exec` tool through one running `sbx mcp` (JSON-RPC lines);
- mcp_http: the `exec` tool through sbxd's /mcp (one 2025-11-25 session);
- sdk_python: `sandbox.exec(["true"])` of sdk/python (when it is there);
- sdk_typescript: `sandbox.exec(["true"])` of sdk/typescript's build
  (when there is one and node; bench/sbx_roundtrip_ts.mjs times it).
Reported, never asserted.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOORS = [
    ("cli", "`sbx exec ID -- true` (a new sbx process)"),
    ("api", "`POST …/exec` on the Unix socket"),
    ("mcp_stdio", "MCP `exec` tool via `sbx mcp` (stdio)"),
    ("mcp_http", "MCP `exec` tool via sbxd's `/mcp`"),
    ("sdk_python", "Python SDK `sandbox.exec`"),
    ("sdk_typescript", "TypeScript SDK `sandbox.exec`"),
]


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def post(sock, path, body, headers=None, timeout=600):
    conn = UnixConnection(sock, timeout)
    try:
        conn.request("POST", path, json.dumps(body),
                     {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                      **(headers or {})})
        res = conn.getresponse()
        return res.status, res.getheader("MCP-Session-Id"), res.read()
    finally:
        conn.close()


def timed(fn):
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def mcp_exec_args(sid):
    return {"name": "exec", "arguments": {"sandbox": sid, "command": ["true"]}}


def check_exec_result(reply):
    result = reply.get("result", {})
    if result.get("isError") or result.get("structuredContent", {}).get("exitCode") != 0:
        raise RuntimeError(f"exec through MCP failed: {json.dumps(reply)[:300]}")


def measure(bench, calls, say, op_failed):
    """{door: [seconds]}; bench is bench/sbx_runner.Bench (SBX_HOST unix:)."""
    sock = os.environ["SBX_HOST"].removeprefix("unix:")
    samples = {key: [] for key, _ in DOORS}
    sid = bench.new()[1]["id"]
    try:
        def record(key, seconds):
            samples[key].append(seconds)
            say(f"roundtrip {key} {seconds * 1000:.0f} ms")

        for _ in range(calls):
            record("cli", bench.exec_true(sid)[0])

        def api_once():
            status, _, body = post(sock, f"/v1/sandboxes/{sid}/exec", {"command": ["true"]})
            if status != 200 or b'"exitCode":0' not in body:
                raise op_failed(f"api exec: {status} {body[:200]!r}")
        for _ in range(calls):
            record("api", timed(api_once))

        mcp = subprocess.Popen([bench.sbx.binary, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
        try:
            def rpc(message):
                mcp.stdin.write(json.dumps(message) + "\n")
                mcp.stdin.flush()
                return json.loads(mcp.stdout.readline())
            rpc({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "bench", "version": "1"}}})
            for i in range(calls):
                record("mcp_stdio", timed(lambda: check_exec_result(
                    rpc({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": mcp_exec_args(sid)}))))
        finally:
            mcp.stdin.close()
            mcp.wait(timeout=60)

        _, session, _ = post(sock, "/mcp", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                                       "clientInfo": {"name": "bench", "version": "1"}}})
        for i in range(calls):
            def http_once():
                _, _, body = post(sock, "/mcp", {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                                                 "params": mcp_exec_args(sid)},
                                  {"MCP-Session-Id": session or "", "MCP-Protocol-Version": "2025-11-25"})
                check_exec_result(json.loads(body))
            record("mcp_http", timed(http_once))

        sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
        try:
            import sandboxer  # sdk/python, standard library only
            sandbox = sandboxer.Sandboxer(host=os.environ["SBX_HOST"]).get(sid)
            for _ in range(calls):
                record("sdk_python", timed(lambda: sandbox.exec(["true"])))
        except Exception as e:  # no SDK here, or it failed: the other rows stand
            say(f"roundtrip sdk_python: {type(e).__name__}: {e}")

        runner = os.path.join(ROOT, "bench", "sbx_roundtrip_ts.mjs")
        if os.path.exists(os.path.join(ROOT, "sdk", "typescript", "dist", "index.js")) and os.path.exists("/usr/bin/node"):
            out = subprocess.run(["/usr/bin/node", runner, sid, str(calls)], capture_output=True, text=True,
                                 timeout=bench.args.op_timeout)
            if out.returncode != 0:
                say(f"roundtrip sdk_typescript: failed: {out.stderr[-300:]}")
            for seconds in json.loads(out.stdout or "[]"):
                record("sdk_typescript", seconds)
        else:
            say("roundtrip sdk_typescript: skipped (no sdk/typescript/dist, or no node)")
    except (op_failed, RuntimeError, OSError, ValueError) as e:
        say(f"roundtrip stopped: {e}")
    finally:
        bench.rm(sid)
    return samples


def format_table(stats, calls, fmt):
    lines = [f"| door ({calls} calls each, one sandbox) | median | min | max | × api |", "|---|---|---|---|---|"]
    api = stats.get("api")
    for key, label in DOORS:
        s = stats.get(key)
        if s is None:
            lines.append(f"| {label} | — | — | — | — |")
            continue
        ratio = f"{s['median'] / api['median']:.2f}" if api else "—"
        lines.append(f"| {label} | {fmt(s['median'])} | {fmt(s['min'])} | {fmt(s['max'])} | {ratio} |")
    return "\n".join(lines)

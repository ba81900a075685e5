"""Level 0: the SDK against a real sbxd over a real sbx-agent on this host (sbxd_guest_fixture).

Run by fixture_test.sh, which sets SANDBOXER_TEST_SOCKET (the Unix socket),
SANDBOXER_TEST_TCP (HOST:PORT), SANDBOXER_TEST_KEY_HOST, _KEY_SCOPED (sbx_run
only), _KEY_READ (read-only) and SANDBOXER_TEST_DIR (the fixture's folder).
sbx_run runs (its guest is this host; the agent runs as us), sbx_off is stopped.
"""

from __future__ import annotations

import datetime
import os
import shutil
import stat
import tempfile
import time
import unittest

import sandboxer
from sandboxer import Sandboxer

SOCKET = os.environ.get("SANDBOXER_TEST_SOCKET")
TCP = os.environ.get("SANDBOXER_TEST_TCP")
KEYS = {k: os.environ.get(f"SANDBOXER_TEST_KEY_{k.upper()}") for k in ("host", "scoped", "read")}
USER = str(os.getuid())

LINES = "".join(f"line {i}\n" for i in range(400)).encode()
PRINT_400 = 'i=0; while [ $i -lt 400 ]; do echo "line $i"; i=$((i+1)); [ $((i % 40)) -eq 0 ] && sleep 0.1; done; true'


@unittest.skipUnless(SOCKET, "SANDBOXER_TEST_SOCKET is unset (run tests/fixture_test.sh)")
class FixtureTest(unittest.TestCase):
    client: Sandboxer
    sb: sandboxer.Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = Sandboxer(f"unix:{SOCKET}", timeout=60)
        cls.sb = cls.client.get("sbx_run")

    def revoke_quietly(self, key_id: str) -> None:
        try:
            self.client.delete_key(key_id)
        except sandboxer.NotFound:
            pass

    def tmpdir(self) -> str:
        d = tempfile.mkdtemp(prefix="sbx-sdk-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    # -- sandboxes -------------------------------------------------------------------------

    def test_health_get_list_find(self) -> None:
        self.assertTrue(self.client.health()["ok"])
        sb = self.client.get("sbx_run")
        self.assertEqual((sb.id, sb.state, sb.labels), ("sbx_run", "running", {}))
        self.assertEqual(sb.refresh().state, "running")
        self.assertEqual({s.id for s in self.client.list()}, {"sbx_run", "sbx_off"})
        self.assertEqual([s.id for s in self.client.list(state="running")], ["sbx_run"])
        self.assertEqual({s.id for s in self.client.list(state=["running", "stopped"])}, {"sbx_run", "sbx_off"})
        self.assertEqual(self.client.list(labels={"owner": "nobody"}), [])
        self.assertIsNone(self.client.find(labels={"owner": "nobody", "team": "x"}))
        self.assertEqual(self.client.find(state="stopped").id, "sbx_off")
        self.assertIsInstance(self.client.limits(), dict)

    def test_typed_errors_unix(self) -> None:
        with self.assertRaises(sandboxer.NotFound) as cm:
            self.client.get("sbx_nope")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        self.assertTrue(cm.exception.request_id.startswith("req_"))
        with self.assertRaises(sandboxer.NotFound):
            sandboxer.Sandbox(self.client, {"id": "sbx_nope"}).exec("true")
        with self.assertRaises(sandboxer.InvalidState) as cm2:
            self.client.get("sbx_off").exec(["true"], user=USER)
        self.assertEqual(cm2.exception.status, 409)
        with self.assertRaises(sandboxer.InvalidArgument):
            self.client.list(state="sleeping")
        with self.assertRaises(sandboxer.Unimplemented):  # the fixture's driver creates nothing
            self.client.create(size="small", labels={"sdk": "test"})
        with self.assertRaises(sandboxer.InvalidState):  # started without hosted ports
            self.sb.host_port(8080)
        with self.assertRaises(sandboxer.NotFound):
            self.client.snapshot("nope")
        with self.assertRaises(sandboxer.NotFound):
            self.client.delete_snapshot("nope")
        self.assertEqual(self.client.snapshots(), [])

    @unittest.skipUnless(TCP and all(KEYS.values()), "no TCP address or keys")
    def test_keys_over_tcp(self) -> None:
        host = Sandboxer(f"http://{TCP}", api_key=KEYS["host"], timeout=60)
        self.assertEqual(host.get("sbx_run").exec(["echo", "tcp"], user=USER, text=True).stdout, "tcp\n")
        scoped = Sandboxer(f"http://{TCP}", api_key=KEYS["scoped"], timeout=60)
        self.assertEqual(scoped.get("sbx_run").exec("echo scoped", user=USER).stdout, b"scoped\n")
        with self.assertRaises(sandboxer.Forbidden) as cm:
            scoped.get("sbx_off")
        self.assertEqual(cm.exception.status, 403)
        with self.assertRaises(sandboxer.Forbidden):
            scoped.list()
        read = Sandboxer(f"http://{TCP}", api_key=KEYS["read"], timeout=60)
        self.assertEqual(read.get("sbx_run").state, "running")
        with self.assertRaises(sandboxer.Forbidden):
            read.get("sbx_run").exec("true", user=USER)
        for key in ("sbxk_" + "0" * 64, "not-a-key", ""):  # "": no Authorization header at all
            with self.assertRaises(sandboxer.Unauthorized) as cm2:
                Sandboxer(f"http://{TCP}", api_key=key).get("sbx_run")
            self.assertEqual((cm2.exception.status, cm2.exception.code), (401, "unauthorized"))

    def test_api_keys(self) -> None:
        def create(name: str | None = None, sandbox_id: str | None = None, read_only: bool = False,
                   expires_in_seconds: int | datetime.timedelta | None = None) -> sandboxer.NewKey:
            key = self.client.create_key(name=name, sandbox_id=sandbox_id, read_only=read_only,
                                         expires_in_seconds=expires_in_seconds)
            self.addCleanup(self.revoke_quietly, key.id)
            return key

        host = create(name="sdk host")
        self.assertIsInstance(host, sandboxer.ApiKey)
        self.assertTrue(host.id.startswith("key_"), host.id)
        self.assertRegex(host.secret, r"^sbxk_[0-9a-f]{64}$")
        self.assertEqual((host.name, host.sandbox_id, host.read_only, host.expires_at), ("sdk host", None, False, None))
        self.assertNotIn(host.secret, repr(host))
        with self.assertRaises(sandboxer.NotFound) as cm:
            self.client.create_key(sandbox_id="sbx_nope")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        with self.assertRaises(sandboxer.InvalidArgument):
            self.client.create_key(expires_in_seconds=0)

        read = create(name="sdk read", read_only=True, expires_in_seconds=3600)
        self.assertEqual((read.name, read.sandbox_id, read.read_only), ("sdk read", None, True))
        created = datetime.datetime.fromisoformat(str(read.created_at))
        expires = datetime.datetime.fromisoformat(str(read.expires_at))
        self.assertEqual(expires - created, datetime.timedelta(hours=1))
        self.assertLess(abs(created - datetime.datetime.now(datetime.timezone.utc)), datetime.timedelta(minutes=5))
        scoped = create(sandbox_id="sbx_run", expires_in_seconds=datetime.timedelta(days=1))
        self.assertEqual((scoped.name, scoped.sandbox_id, scoped.read_only), ("", "sbx_run", False))
        self.assertEqual(len({host.secret, read.secret, scoped.secret}), 3)

        listed = self.client.keys()
        self.assertTrue(all(isinstance(k, sandboxer.ApiKey) and not isinstance(k, sandboxer.NewKey) for k in listed))
        by_id = {k.id: k for k in listed}
        self.assertTrue({host.id, read.id, scoped.id} <= by_id.keys())
        times = [str(k.created_at) for k in listed]
        self.assertEqual(times, sorted(times))  # oldest first
        made = [k.id for k in listed if k.id in (host.id, read.id, scoped.id)]
        self.assertEqual(made, [host.id, read.id, scoped.id])  # in the order they were made
        got = by_id[read.id]
        self.assertEqual((got.name, got.created_at, got.sandbox_id, got.read_only, got.expires_at),
                         (read.name, read.created_at, None, True, read.expires_at))
        everything = repr(listed) + repr([k.raw for k in listed])
        self.assertNotIn("secret", everything)
        for key in (host, read, scoped):
            self.assertNotIn(key.secret[len("sbxk_"):], everything)

        if TCP:
            as_read = Sandboxer(f"http://{TCP}", api_key=read.secret, timeout=60)
            self.assertEqual({s.id for s in as_read.list()}, {"sbx_run", "sbx_off"})
            self.assertIn(read.id, [k.id for k in as_read.keys()])  # a read-only key may list keys
            with self.assertRaises(sandboxer.Forbidden) as cm2:
                as_read.create_key(name="from a read-only key")
            self.assertEqual((cm2.exception.status, cm2.exception.code), (403, "forbidden"))
            with self.assertRaises(sandboxer.Forbidden):
                as_read.delete_key(host.id)
            as_scoped = Sandboxer(f"http://{TCP}", api_key=scoped.secret, timeout=60)
            self.assertEqual(as_scoped.get("sbx_run").state, "running")
            with self.assertRaises(sandboxer.Forbidden):
                as_scoped.keys()  # a sandbox's key sees no keys
            as_host = Sandboxer(f"http://{TCP}", api_key=host.secret, timeout=60)
            self.assertEqual(as_host.get("sbx_off").state, "stopped")

        self.client.delete_key(read.id)
        self.assertNotIn(read.id, [k.id for k in self.client.keys()])
        if TCP:
            with self.assertRaises(sandboxer.Unauthorized) as cm3:
                Sandboxer(f"http://{TCP}", api_key=read.secret, timeout=60).list()
            self.assertEqual((cm3.exception.status, cm3.exception.code), (401, "unauthorized"))
        with self.assertRaises(sandboxer.NotFound):
            self.client.delete_key(read.id)

    def test_connection_error(self) -> None:
        with self.assertRaises(sandboxer.SandboxerConnectionError):
            Sandboxer(f"unix:{SOCKET}.missing", max_retries=1, backoff=0.01).health()

    # -- exec ------------------------------------------------------------------------------

    def test_exec_simple(self) -> None:
        r = self.sb.exec("echo hi; echo oops >&2; exit 3", user=USER)
        self.assertEqual((r.exit_code, r.signal, r.timed_out, r.stdout, r.stderr), (3, None, False, b"hi\n", b"oops\n"))
        self.assertFalse(r.ok)
        r = self.sb.exec(["printf", "%s", "héllo"], user=USER, text=True, env={"K": "V"})
        self.assertEqual(r.stdout, "héllo")
        r = self.sb.exec(["sh", "-c", 'echo "$K" "$(pwd)"'], user=USER, env={"K": "V"}, cwd="/tmp", text=True)
        self.assertEqual(r.stdout, "V /tmp\n")
        with self.assertRaises(sandboxer.CommandError) as cm:
            self.sb.exec("exit 2", user=USER, check=True)
        self.assertEqual(cm.exception.result.exit_code, 2)
        self.assertEqual(self.sb.exec(["no-such-program-here"], user=USER).exit_code, 127)
        with self.assertRaises(sandboxer.NotFound):
            self.sb.exec("true", user=USER, cwd="/no/such/dir")

    def test_exec_binary_stdin(self) -> None:
        data = bytes(range(256)) * 1024
        r = self.sb.exec(["cat"], stdin=data, user=USER)
        self.assertEqual((r.exit_code, r.stdout), (0, data))
        r = self.sb.exec(["sh", "-c", "cat >&2"], stdin=data, user=USER)
        self.assertEqual((r.stdout, r.stderr), (b"", data))
        every = self.sb.exec(["python3", "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)))"], user=USER)
        self.assertEqual(every.stdout, bytes(range(256)))

    def test_exec_stream(self) -> None:
        seen: list[tuple[str, bytes, float]] = []
        started = time.monotonic()
        with self.sb.exec_stream("echo a; sleep 1; echo b >&2; exit 4", user=USER) as stream:
            for ev in stream:
                seen.append((ev.type, ev.data, time.monotonic() - started))
        self.assertEqual([(t, d) for t, d, _ in seen],
                         [("start", b""), ("stdout", b"a\n"), ("stderr", b"b\n"), ("exit", b"")])
        self.assertLess(seen[1][2], 0.8, "stdout came only at the end")
        self.assertGreaterEqual(seen[2][2] - seen[1][2], 0.8)
        self.assertEqual(stream.exit.exit_code, 4)
        self.assertIsInstance(stream.pid, int)

    def test_exec_timeout(self) -> None:
        started = time.monotonic()
        r = self.sb.exec(["sleep", "30"], timeout=0.5, user=USER)
        self.assertEqual((r.timed_out, r.signal, r.exit_code), (True, 9, None))
        self.assertLess(time.monotonic() - started, 10)

    # -- detached processes ---------------------------------------------------------------

    def test_attach_from_offset_loses_nothing(self) -> None:
        proc = self.sb.start(PRINT_400, user=USER)
        got = b""
        with proc.attach() as stream:
            for chunk in stream:
                self.assertEqual(chunk.offset, len(got))
                got += chunk.data
                if len(got) >= 200:
                    break
        self.assertLess(len(got), len(LINES), "the first read should not see it all")
        last = stream.offset
        self.assertEqual(last, len(got))
        rest = proc.attach(offset=last)
        for chunk in rest:
            self.assertEqual(chunk.offset, len(got))
            got += chunk.data
        self.assertEqual(got, LINES)
        self.assertEqual((rest.exit.exit_code, rest.exit.signal), (0, None))
        self.assertEqual(proc.output(0, follow=True).data, LINES)
        self.assertEqual(proc.output(7).data, LINES[7:])
        with self.assertRaises(sandboxer.InvalidArgument):
            proc.output(len(LINES) + 10)
        st = proc.status()
        self.assertEqual((st.running, st.exit_code, st.output_bytes), (False, 0, len(LINES)))
        self.assertTrue(LINES.endswith(st.tail))
        self.assertIn(proc.id, [p.id for p in self.sb.processes()])

    def test_output_follow_false(self) -> None:
        proc = self.sb.start("echo first; sleep 2; echo second", user=USER)
        deadline = time.monotonic() + 10
        while True:
            out = proc.output(0, follow=False)
            if out.data or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual((out.data, out.running, out.end), (b"first\n", True, 6))
        again = proc.output(out.end)
        self.assertTrue(again.running)
        proc.wait(timeout=20)
        done = proc.output(out.end)
        self.assertEqual((done.data, done.running, done.exit_code), (b"second\n", False, 0))

    def test_write_stdin(self) -> None:
        proc = self.sb.start(["cat"], user=USER, stdin_open=True)
        w = proc.write_stdin(b"hello\n")
        self.assertEqual((w.written, w.open), (6, True))
        big = bytes(range(256)) * 8192  # 2 MiB: several requests, some of them short
        self.assertEqual(proc.write_stdin(big).written, len(big))
        w = proc.write_stdin("bye\n", eof=True)
        self.assertEqual((w.written, w.open), (4, False))
        st = proc.wait(timeout=30)
        self.assertEqual(st.exit_code, 0)
        self.assertEqual(proc.output(0, follow=True).data, b"hello\n" + big + b"bye\n")
        no_pipe = self.sb.start(["sleep", "5"], user=USER)
        with self.assertRaises(sandboxer.InvalidArgument):
            no_pipe.write_stdin(b"x")
        no_pipe.kill()

    def test_signal(self) -> None:
        proc = self.sb.start(["sleep", "60"], user=USER)
        self.assertTrue(proc.status().running)
        self.assertTrue(proc.signal("TERM"))
        st = proc.wait(timeout=20)
        self.assertEqual((st.running, st.exit_code, st.signal), (False, None, 15))
        self.assertFalse(proc.signal(9))
        with self.assertRaises(sandboxer.NotFound):
            self.sb.process("p0000000000000000").status()

    def test_history(self) -> None:
        self.sb.exec(["echo", "history-marker"], user=USER)
        self.assertIn(["echo", "history-marker"], [h["command"] for h in self.sb.history()])

    def test_logs(self) -> None:
        folder = os.environ.get("SANDBOXER_TEST_DIR")
        if not folder:
            self.skipTest("SANDBOXER_TEST_DIR is unset")
        with open(os.path.join(folder, "sbx_run-console.log"), "wb") as f:
            f.write(b"boot\nhello from the guest\n")
        self.assertEqual(self.sb.logs(), b"boot\nhello from the guest\n")
        self.assertEqual(self.sb.logs(tail=6), b"guest\n")
        self.assertEqual(self.sb.logs(offset=5), b"hello from the guest\n")

    # -- files -----------------------------------------------------------------------------

    def test_files(self) -> None:
        d = self.tmpdir()
        f = self.sb.files
        self.assertEqual(f.write(f"{d}/a.txt", "héllo\n"), 7)
        self.assertEqual(f.read_text(f"{d}/a.txt"), "héllo\n")
        blob = os.urandom(3 * 1024 * 1024 + 5)
        f.write(f"{d}/blob", blob, mode=0o600)
        self.assertEqual(f.read_bytes(f"{d}/blob"), blob)
        st = f.stat(f"{d}/blob")
        self.assertEqual((st.type, st.size, st.mode & 0o777, st.is_file), ("file", len(blob), 0o600, True))
        with f.open(f"{d}/blob") as resp:
            self.assertGreater(sum(1 for _ in resp.iter_chunks(65536)), 1)
        f.mkdir(f"{d}/sub/deeper")
        f.mkdir(f"{d}/sub/deeper")  # an existing directory is fine with parents
        self.assertTrue(f.stat(f"{d}/sub").is_dir)
        os.symlink("a.txt", f"{d}/ln")
        self.assertEqual(f.stat(f"{d}/ln").target, "a.txt")
        self.assertEqual([(e.name, e.type) for e in f.list(d)],
                         [("a.txt", "file"), ("blob", "file"), ("ln", "symlink"), ("sub", "dir")])
        with self.assertRaises(sandboxer.InvalidArgument):
            f.remove(f"{d}/sub")
        f.remove(f"{d}/sub", recursive=True)
        f.remove(f"{d}/blob")
        self.assertFalse(f.exists(f"{d}/blob"))
        with self.assertRaises(sandboxer.NotFound):
            f.read_bytes(f"{d}/blob")
        with self.assertRaises(sandboxer.InvalidArgument):
            f.read_bytes(d)
        with self.assertRaises(sandboxer.NotFound):
            f.write(f"{d}/missing/x", b"x")
        local = os.path.join(self.tmpdir(), "copy")
        self.assertEqual(f.download(f"{d}/a.txt", local), 7)
        f.upload(local, f"{d}/b.txt")
        self.assertEqual(f.read_text(f"{d}/b.txt"), "héllo\n")

    def test_tree_round_trip(self) -> None:
        src = self.tmpdir()
        os.makedirs(f"{src}/pkg/data")
        os.makedirs(f"{src}/empty")
        with open(f"{src}/pkg/main.py", "w") as fh:
            fh.write("print(42)\n")
        os.chmod(f"{src}/pkg/main.py", 0o755)
        blob = os.urandom(200_000)
        with open(f"{src}/pkg/data/blob.bin", "wb") as fh:
            fh.write(blob)
        os.symlink("pkg/main.py", f"{src}/run")
        guest = os.path.join(self.tmpdir(), "guest", "proj")
        up = self.sb.files.upload_dir(src, guest)
        self.assertEqual((up.entries, up.skipped), (6, 0))
        self.assertEqual(self.sb.files.stat(f"{guest}/run").target, "pkg/main.py")
        self.assertEqual(self.sb.exec(["test", "-x", f"{guest}/pkg/main.py"], user=USER).exit_code, 0)
        out = os.path.join(self.tmpdir(), "out")
        down = self.sb.files.download_dir(guest, out)
        self.assertEqual(down.entries, 6)
        self.assertEqual(sorted(os.listdir(out)), ["empty", "pkg", "run"])
        self.assertEqual(os.readlink(f"{out}/run"), "pkg/main.py")
        with open(f"{out}/pkg/data/blob.bin", "rb") as fh:
            self.assertEqual(fh.read(), blob)
        self.assertEqual(stat.S_IMODE(os.stat(f"{out}/pkg/main.py").st_mode), 0o755)
        with open(f"{out}/run") as fh:
            self.assertEqual(fh.read(), "print(42)\n")
        with self.assertRaises(sandboxer.NotFound):
            self.sb.files.download_dir(f"{guest}/nothing", out)

    # -- desktop (one that runs: the nested harness; no desktop starts on this host) -------

    def test_desktop_without_one_running(self) -> None:
        info = self.sb.desktop.status()
        self.assertEqual((info.running, info.display, info.width, info.vnc_port, info.url),
                         (False, None, None, None, None))
        with self.assertRaises(sandboxer.InvalidState):
            self.sb.desktop.screenshot()
        with self.assertRaises(sandboxer.InvalidState):
            self.sb.desktop.click(1, 2)
        with self.assertRaises(sandboxer.InvalidArgument):
            self.sb.desktop.action("dance")
        with self.assertRaises(sandboxer.InvalidState):
            self.client.get("sbx_off").desktop.status()


if __name__ == "__main__":
    unittest.main()

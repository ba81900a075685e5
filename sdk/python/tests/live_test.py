"""The SDK against a real sbxd with real VMs: every method once, in order.

Needs SBX_HOST (``unix:/run/sandboxer/sbxd.sock``); skipped without it.
Run: ``SBX_HOST=unix:/run/sandboxer/sbxd.sock python3 -m unittest -v tests/live_test.py``
(from sdk/python, or with the package installed). Every VM operation may
take a minute under emulation, so the waits are long. It deletes what it
makes: its sandboxes carry the label ``sdk-live=<run id>``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import unittest
import uuid
from typing import Any

import sandboxer
from sandboxer import Sandbox, Sandboxer

HOST = os.environ.get("SBX_HOST")
RUN = uuid.uuid4().hex[:12]
LABELS = {"sdk-live": RUN}
SNAPSHOT = f"sdk-live-{RUN}"
WAIT = 180.0  # seconds for anything to show up inside a guest
COUNTER = "i=0; while true; do echo $i; i=$((i+1)); sleep 0.5; done"


def wait_for(what: str, check: Any, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@unittest.skipUnless(HOST, "SBX_HOST is unset: the live test needs a real sbxd with VMs")
class LiveTest(unittest.TestCase):
    client: Sandboxer
    sb: Sandbox | None = None
    made: list[str] = []
    counter: sandboxer.Process | None = None
    counter_offset = 0

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = Sandboxer(HOST, timeout=600, max_retries=6, max_retry_after=300)
        cls.made = []

    @classmethod
    def tearDownClass(cls) -> None:
        for id in cls.made:
            try:
                cls.client.get(id).delete()
            except sandboxer.NotFound:
                pass
            except sandboxer.SandboxerError as e:
                print(f"cleanup: {id}: {e}")
        try:
            cls.client.delete_where(labels=LABELS)
        except sandboxer.SandboxerError as e:
            print(f"cleanup: label {LABELS}: {e}")
        try:
            cls.client.delete_snapshot(SNAPSHOT)
        except sandboxer.NotFound:
            pass

    def need(self) -> Sandbox:
        if self.sb is None:
            self.skipTest("no sandbox (create failed)")
        return self.sb

    def test_01_create_idempotent(self) -> None:
        key = f"sdk-live-{RUN}"
        options: dict[str, Any] = dict(cpus=1, memory_mib=1024, labels={**LABELS, "role": "main"}, ttl="2h",
                                       idle_minutes=0, idempotency_key=key)
        sb = self.client.create(**options)
        type(self).sb = sb
        self.made.append(sb.id)
        self.assertEqual(sb.state, "running")
        self.assertEqual((sb.cpus, sb.memory_mib, sb.labels["role"]), (1, 1024, "main"))
        self.assertFalse(sb.replayed)
        again = self.client.create(**options)  # a retry: the same key and body
        self.assertEqual((again.id, again.replayed), (sb.id, True))
        self.assertEqual([s.id for s in self.client.list(labels=LABELS)], [sb.id])
        with self.assertRaises(sandboxer.IdempotencyConflict):
            other: dict[str, Any] = {**options, "memory_mib": 2048}
            self.client.create(**other)

    def test_02_exec(self) -> None:
        sb = self.need()
        r = sb.exec(["uname", "-s"], text=True)
        self.assertEqual((r.exit_code, r.stdout), (0, "Linux\n"))
        r = sb.exec("echo out; echo err >&2; exit 3")
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, b"out\n", b"err\n"))
        data = bytes(range(256)) * 64
        self.assertEqual(sb.exec(["cat"], stdin=data).stdout, data)
        events = [ev.type for ev in sb.exec_stream("echo a; sleep 1; echo b")]
        self.assertEqual(events, ["start", "stdout", "stdout", "exit"])
        r = sb.exec(["sleep", "60"], timeout=1)
        self.assertEqual((r.timed_out, r.signal), (True, 9))
        self.assertGreaterEqual(len(sb.history()), 5)

    def test_03_files(self) -> None:
        sb = self.need()
        f = sb.files
        f.mkdir("/root/sdk/sub")
        self.assertEqual(f.write("/root/sdk/a.txt", "héllo\n", mode=0o600), 7)
        self.assertEqual(f.read_text("/root/sdk/a.txt"), "héllo\n")
        st = f.stat("/root/sdk/a.txt")
        self.assertEqual((st.type, st.size, st.mode & 0o777), ("file", 7, 0o600))
        self.assertEqual([e.name for e in f.list("/root/sdk")], ["a.txt", "sub"])
        local = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, local, True)
        os.makedirs(f"{local}/tree/d")
        with open(f"{local}/tree/d/x.bin", "wb") as fh:
            fh.write(os.urandom(100_000))
        os.symlink("d/x.bin", f"{local}/tree/link")
        self.assertEqual(f.upload_dir(f"{local}/tree", "/root/sdk/tree").entries, 3)
        self.assertEqual(f.stat("/root/sdk/tree/link").target, "d/x.bin")
        f.download_dir("/root/sdk/tree", f"{local}/back")
        with open(f"{local}/tree/d/x.bin", "rb") as a, open(f"{local}/back/d/x.bin", "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertEqual(os.readlink(f"{local}/back/link"), "d/x.bin")
        f.remove("/root/sdk/sub")
        self.assertFalse(f.exists("/root/sdk/sub"))

    def test_04_counter_stop_resume(self) -> None:
        sb = self.need()
        proc = sb.start(COUNTER)
        type(self).counter = proc
        before = wait_for("the counter's output", lambda: (o := proc.output(0)).data.count(b"\n") >= 4 and o)
        sb.files.write("/root/sdk/before-stop", "kept\n")
        at_stop = proc.output(0).end  # processes are out of reach while it is stopped
        self.assertGreaterEqual(at_stop, before.end)
        stopped = sb.stop(memory=True)
        self.assertEqual(stopped.state, "stopped")
        with self.assertRaises(sandboxer.InvalidState) as cm:  # 409: exec on a stopped sandbox
            sb.exec("true")
        self.assertEqual(cm.exception.status, 409)
        self.assertEqual(sb.files.read_text("/root/sdk/before-stop"), "kept\n")  # from its disk
        sb.resume()
        self.assertEqual(sb.state, "running")
        self.assertTrue(sb.memory_restored)
        st = proc.status()
        self.assertTrue(st.running)
        self.assertEqual(st.pid, proc.pid)
        resumed = proc.output(0).end
        wait_for("the counter after the resume", lambda: proc.output(resumed).data.count(b"\n") >= 3)
        numbers = [int(x) for x in proc.output(0).data.split()]
        self.assertEqual(numbers, list(range(len(numbers))), "the counter skipped or restarted")
        got = b""
        with proc.attach(at_stop) as stream:
            for chunk in stream:
                got += chunk.data
                if got.count(b"\n") >= 2:
                    break
        self.assertEqual(got, proc.output(at_stop).data[:len(got)])
        type(self).counter_offset = stream.offset
        with self.assertRaises(sandboxer.InvalidState):
            sb.resume()

    def test_05_fork(self) -> None:
        sb = self.need()
        children = sb.fork(count=1, memory=True)
        self.made.extend(c.id for c in children)
        self.assertEqual(len(children), 1)
        child = children[0]
        self.assertNotEqual(child.id, sb.id)
        self.assertEqual(child.state, "running")
        self.assertEqual(child.files.read_text("/root/sdk/a.txt"), "héllo\n")
        self.assertEqual(child.exec(["echo", "child"]).stdout, b"child\n")
        self.assertEqual(self.client.get(sb.id).state, "running")
        child.delete()
        with self.assertRaises(sandboxer.NotFound):
            child.refresh()

    def test_06_snapshot(self) -> None:
        sb = self.need()
        snap = sb.snapshot(SNAPSHOT)
        self.assertEqual((snap.name, snap.from_), (SNAPSHOT, sb.id))
        self.assertIn(SNAPSHOT, [s.name for s in self.client.snapshots()])
        self.assertEqual(self.client.snapshot(SNAPSHOT).name, SNAPSHOT)
        with self.assertRaises(sandboxer.AlreadyExists):
            sb.snapshot(SNAPSHOT)
        with Sandbox.create(client=self.client, from_=SNAPSHOT, labels={**LABELS, "role": "from-snapshot"}) as fs:
            self.made.append(fs.id)
            self.assertEqual(fs.from_, SNAPSHOT)
            self.assertEqual(fs.files.read_text("/root/sdk/a.txt"), "héllo\n")
            self.assertEqual(fs.exec("echo ok").stdout, b"ok\n")
        with self.assertRaises(sandboxer.NotFound):  # the context manager deleted it
            self.client.get(fs.id)
        snap.delete()
        with self.assertRaises(sandboxer.NotFound):
            self.client.snapshot(SNAPSHOT)
        self.assertTrue(self.counter is None or self.counter.status().running)

    def test_07_hosted_port(self) -> None:
        sb = self.need()
        try:
            hp = sb.host_port(8080)
        except (sandboxer.InvalidState, sandboxer.InvalidArgument) as e:  # --proxy-listen off, --network off
            self.skipTest(f"this sbxd hosts no ports here: {e.message}")
        self.assertTrue(hp.url and hp.url.startswith("https://"), hp.url)
        self.assertEqual(str(hp), hp.url)
        self.assertTrue(hp.token and hp.token_url and "_token=" in hp.token_url)
        public = sb.host_port(8080, public=True)
        self.assertEqual((public.url, public.public), (hp.url, True))
        self.assertEqual([p.port for p in sb.hosted_ports()], [8080])
        sb.unhost(8080)
        with self.assertRaises(sandboxer.NotFound):
            sb.unhost(8080)

    def test_08_find_and_errors(self) -> None:
        sb = self.need()
        self.assertEqual(self.client.find(labels={**LABELS, "role": "main"}), sb)
        self.assertEqual(self.client.find(labels={**LABELS, "role": "main"}, state="running").id, sb.id)
        self.assertIsNone(self.client.find(labels={**LABELS, "role": "none"}))
        self.assertIn(sb.id, [s.id for s in self.client.list(labels=LABELS, state=["running"])])
        with self.assertRaises(sandboxer.NotFound) as cm:
            self.client.get("sbx_0000000000000000")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        with self.assertRaises(sandboxer.InvalidArgument):
            self.client.create(cpus=1, memory_mib=1024, labels=LABELS, ttl="1x")

    def test_09_context_manager_and_delete(self) -> None:
        sb = self.need()
        if self.counter is not None:
            self.assertTrue(self.counter.signal("TERM"))
            self.assertEqual(self.counter.wait(timeout=WAIT).signal, 15)
        with self.client.create(cpus=1, memory_mib=1024, labels={**LABELS, "role": "with"}) as tmp:
            self.made.append(tmp.id)
            self.assertEqual(tmp.exec("true").exit_code, 0)
        with self.assertRaises(sandboxer.NotFound):
            self.client.get(tmp.id)
        sb.delete()
        with self.assertRaises(sandboxer.NotFound):
            sb.refresh()
        self.assertEqual(self.client.list(labels=LABELS), [])


if __name__ == "__main__":
    unittest.main()

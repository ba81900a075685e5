"""Figures of the snapshot workloads from recorded text: sbx-vmm's log
lines and control replies, QEMU's QMP answers (against a scripted QMP
server), /proc/PID/smaps_rollup and /proc/meminfo."""

import json
import os
import socket
import tempfile
import threading
import time
import unittest

from sbxbench import guest_agent, qmp
from sbxbench.snapshot_origin import qemu_save_figures, sbx_save_figures
from sbxbench.workload_fork import (answer_figures, figure_list, mem_available_mib, memory_figures,
                                    qemu_memory_problem)
from sbxbench.workload_restore import restore_figures

# sbx-vmm's lines (vmm/vm.cpp, snapshot/lazy_memory.cpp) behind base/log.cpp's prefix.
SBX_RESTORE_LOG = """sbx-vmm: info: restoring /tmp/w/sbx.compressed (lazy)
sbx-vmm: info: VM set up in 241.503 ms; starting 1 vCPU(s)
sbx-vmm: info: guest memory fully loaded from the snapshot 8620.4 ms after the start (1812 faults served, 97 of 1536 chunks installed by a fault first)
"""
# A control-socket snapshot reply (docs/vmm-control.md) of a 1536 MiB guest.
SNAPSHOT_REPLY = {"ok": True, "state": "paused", "vcpus": 1, "memory_mib": 1536,
                  "memory_bytes": 1536 << 20, "zero_bytes": 458 << 20, "file_bytes": 1034 << 20,
                  "working_set_bytes": 12 << 20, "pause_ms": 3.5, "write_ms": 15596.5}
# QEMU 7.2's query-migrate after a completed migration (qapi/migration.json MigrationInfo).
QUERY_MIGRATE_DONE = {"status": "completed", "setup-time": 2, "downtime": 26981, "total-time": 26990,
                      "ram": {"transferred": 1132462080, "remaining": 0, "total": 1610940416,
                              "duplicate": 117000, "normal": 276000, "mbps": 335.9}}
SMAPS_ROLLUP = """5583c0d1e000-7ffd4a5f4000 ---p 00000000 00:00 0                          [rollup]
Rss:             1112444 kB
Pss:              290111 kB
Pss_Anon:          12004 kB
Shared_Clean:    1100000 kB
"""


class LogAndReplyTest(unittest.TestCase):
    def test_sbx_log_lines(self):
        self.assertEqual(guest_agent.search_log(SBX_RESTORE_LOG, guest_agent.VM_SET_UP), 241.503)
        self.assertEqual(guest_agent.search_log(SBX_RESTORE_LOG, guest_agent.LAZY_LOADED), 8620.4)
        self.assertIsNone(guest_agent.search_log("sbx-vmm: error: truncated", guest_agent.VM_SET_UP))

    def test_wait_for_line_in_a_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "log")
            threading.Timer(0.1, lambda: open(path, "w").write(SBX_RESTORE_LOG)).start()
            self.assertEqual(guest_agent.wait_for_line(path, guest_agent.VM_SET_UP, 5), 241.503)
            self.assertIsNone(guest_agent.wait_for_line(path, r"never ([0-9]+)", 0.1))

    def test_sbx_save_figures(self):
        figs = sbx_save_figures(SNAPSHOT_REPLY, 1034 << 20, 1000 << 20)
        self.assertEqual(figs["save_ms"], 15600.0)  # pause + write, as snapshot_runner.py
        self.assertEqual((figs["memory_mib"], figs["touched_mib"], figs["working_set_mib"]), (1536, 1078, 12))
        self.assertEqual((figs["file_mib"], figs["disk_mib"]), (1034, 1000))
        self.assertAlmostEqual(figs["throughput_mb_s"], 1536 * 1.048576 / 15.6)

    def test_qemu_save_figures(self):
        figs = qemu_save_figures(27.0, 1536, 1080 << 20, 1080 << 20, QUERY_MIGRATE_DONE)
        self.assertEqual(figs["save_ms"], 27000.0)
        self.assertEqual(figs["migrate_total_ms"], 26990.0)
        self.assertAlmostEqual(figs["transferred_mib"], 1080.0)
        self.assertAlmostEqual(figs["throughput_mb_s"], 1536 * 1.048576 / 27.0)
        self.assertNotIn("touched_mib", figs)

    def test_restore_figures(self):
        eager = restore_figures(to_agent_s=7.55, first_instruction_ms=6980.0, fully_loaded_ms=6980.0)
        self.assertEqual(eager["to_agent"], 7550.0)
        self.assertAlmostEqual(eager["first_instruction_to_agent"], 570.0)
        private = restore_figures(to_agent_s=1.25, first_instruction_ms=240.0, fully_loaded_ms=None)
        self.assertNotIn("to_fully_loaded", private)


class SpawnTest(unittest.TestCase):
    def test_pinned_child_and_unpinned_parent(self):
        before = os.sched_getaffinity(0)
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "log")
            proc = guest_agent.spawn(["grep", "Cpus_allowed_list", "/proc/self/status"], log, (0,))
            self.assertEqual(guest_agent.stop(proc, 30), 0)
            self.assertEqual(open(log).read().split(), ["Cpus_allowed_list:", "0"])
        self.assertEqual(os.sched_getaffinity(0), before)


class ForkFiguresTest(unittest.TestCase):
    def test_answers_in_order(self):
        figs = answer_figures(0.015, [2.0, 1.0, 3.5])
        self.assertEqual([figs[f"answer_{k}"] for k in (1, 2, 3)], [1000.0, 2000.0, 3500.0])
        self.assertEqual((figs["all_answered"], figs["spawn_ms"]), (3500.0, 15.0))
        self.assertEqual([f["id"] for f in figure_list(3)][:5], ["spawn_ms", "answer_1", "answer_2", "answer_3",
                                                                 "all_answered"])

    def test_memory(self):
        one = guest_agent.parse_smaps_rollup(SMAPS_ROLLUP)
        self.assertEqual((one["Rss"], one["Pss"]), (1112444, 290111))
        figs = memory_figures([one, one])
        self.assertAlmostEqual(figs["rss_mib"], 2 * 1112444 / 1024)
        self.assertAlmostEqual(figs["pss_to_rss"], 290111 / 1112444)
        touched = memory_figures([one], "_touched")
        self.assertEqual(set(touched), {"rss_touched_mib", "pss_touched_mib", "pss_to_rss_touched"})
        self.assertEqual(memory_figures([one, {}]), {})  # an unreadable process: no memory figures
        self.assertIn("Rss", guest_agent.memory_kib(os.getpid()))

    def test_qemu_children_must_fit(self):
        self.assertEqual(mem_available_mib("MemTotal: 8000000 kB\nMemAvailable:    4194304 kB\n"), 4096)
        self.assertIsNone(qemu_memory_problem(4, 300 << 20, 4096))
        problem = qemu_memory_problem(4, 1080 << 20, 4096)
        self.assertIn("4 QEMU children need about 4576 MiB", problem)
        self.assertIsNone(qemu_memory_problem(4, 1080 << 20, None))


class FakeQmp:
    """A QMP server on a Unix socket that answers from a script: command ->
    list of `return` values (the last one repeats), or {"error": ...}."""

    def __init__(self, path, script):
        self.script = {k: list(v) for k, v in script.items()}
        self.received = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(1)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        conn, _ = self.server.accept()
        with conn, conn.makefile("rb") as f:
            conn.sendall(b'{"QMP": {"version": {"qemu": {"major": 7, "minor": 2}}, "capabilities": []}}\n')
            for line in f:
                name = json.loads(line)["execute"]
                self.received.append(name)
                answers = self.script.get(name, [{}])
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                if name in ("stop", "cont"):  # QEMU sends events too; the client skips them
                    conn.sendall(b'{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}\n')
                reply = answer if isinstance(answer, dict) and "error" in answer else {"return": answer}
                conn.sendall(json.dumps(reply).encode() + b"\n")


class QmpTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "qmp.sock")

    def tearDown(self):
        self.tmp.cleanup()

    def test_save_to_file(self):
        fake = FakeQmp(self.path, {"query-migrate": [{"status": "setup"}, {"status": "active"}, QUERY_MIGRATE_DONE]})
        client = qmp.Qmp(self.path, timeout=5)
        qmp.lift_bandwidth_limit(client)
        saved = qmp.save_to_file(client, "/tmp/w/vm.migration")
        self.assertEqual(saved["info"]["total-time"], 26990)
        self.assertEqual(fake.received, ["qmp_capabilities", "migrate-set-parameters", "stop", "migrate",
                                         "query-migrate", "query-migrate", "query-migrate"])
        client.close()

    def test_failed_save_raises(self):
        FakeQmp(self.path, {"query-migrate": [{"status": "failed", "error-desc": "disk full"}]})
        client = qmp.Qmp(self.path, timeout=5)
        with self.assertRaisesRegex(qmp.QmpError, "disk full"):
            qmp.save_to_file(client, "/x")

    def test_load_incoming_then_cont(self):
        fake = FakeQmp(self.path, {
            "query-status": [{"status": "inmigrate"}, {"status": "paused"}, {"status": "paused"},
                             {"status": "running"}],
            "query-migrate": [{"status": "active"}, {"status": "completed"}]})
        client = qmp.Qmp(self.path, timeout=5)
        started = time.monotonic()
        seconds = qmp.load_incoming(client, "/tmp/w/vm.migration", started)
        self.assertGreaterEqual(seconds, 0.0)
        self.assertEqual(fake.received[1:], ["migrate-incoming", "query-status", "query-status", "query-migrate",
                                             "query-status", "query-migrate", "cont", "query-status"])

    def test_error_reply_and_bad_state(self):
        FakeQmp(self.path, {"migrate-incoming": [{"error": {"class": "GenericError", "desc": "no -incoming"}}]})
        client = qmp.Qmp(self.path, timeout=5)
        with self.assertRaisesRegex(qmp.QmpError, "no -incoming"):
            qmp.load_incoming(client, "/x", time.monotonic())

    def test_shutdown_during_load_raises(self):
        FakeQmp(self.path, {"query-status": [{"status": "shutdown"}], "query-migrate": [{"status": "failed"}]})
        client = qmp.Qmp(self.path, timeout=5)
        with self.assertRaisesRegex(qmp.QmpError, "status shutdown"):
            qmp.load_incoming(client, "/x", time.monotonic())


if __name__ == "__main__":
    unittest.main()

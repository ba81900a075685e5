"""The exec workload's pieces without a guest: figures from clock readings,
one sample per exec in the rounds, the exec exchange against scripted
agent frames (docs/agent-protocol.md, "exec"), n/a reasons, and a
synthetic results file with its schema, ratios and report."""

import copy
import json
import socket
import struct
import tempfile
import threading
import unittest
from pathlib import Path

from sbxbench import guest_agent, results, schema_check, workload_exec
from sbxbench.report_markdown import render_report
from sbxbench.report_plots import matplotlib_pyplot
from sbxbench.test_snapshot_results import _doc, _vmm
from sbxbench.vmm_spec import VmmSpec
from sbxbench.workload_common import finish_statuses, run_rounds

agent_frames = guest_agent.agent_frames


def synthetic_exec(execs=5, runs=4):
    """sbx-vmm's execs around 0.1 s fresh and 0.08 s reused, QEMU's twice that."""
    vmms = [_vmm("sbx", "sbx", "sbx-vmm, hybrid vsock"), _vmm("qemu", "qemu", "QEMU microvm, vhost-vsock")]
    doc = _doc("exec", workload_exec.figure_list(), vmms, {}, [], runs=runs, execs=execs, fill_mib=0)
    for r in range(runs):
        for position, (name, scale) in enumerate((("sbx", 1.0), ("qemu", 2.0))):
            for i in range(execs):
                fresh = workload_exec.fresh_figures(0.0, 0.06 * scale, 0.07 * scale, (0.1 + i / 1000) * scale)
                doc["runs"].append({"vmm": name, "round": r, "position": position, "warmup": False, "sample": i,
                                    "ok": True, "error": None,
                                    "figures": {**fresh, "reused_round_trip": (80.0 + i) * scale}})
    return results.recompute_statistics(doc)


def _frame(kind, body):
    return struct.pack("<I", len(body) + 1) + bytes([kind]) + body


class ExecFiguresTest(unittest.TestCase):
    def test_fresh_figures(self):
        figs = workload_exec.fresh_figures(10.0, 10.002, 10.0025, 10.004)
        self.assertAlmostEqual(figs["fresh_connect"], 2.0)
        self.assertAlmostEqual(figs["fresh_hello"], 0.5)
        self.assertAlmostEqual(figs["fresh_exec"], 1.5)
        self.assertAlmostEqual(figs["fresh_round_trip"], 4.0)

    def test_samples_pair_the_ith_execs(self):
        fresh = [workload_exec.fresh_figures(0, 0.001, 0.002, 0.003 + i) for i in range(3)]
        samples = workload_exec.exec_samples(fresh, [1.0, 2.0, 3.0])
        self.assertEqual([s["reused_round_trip"] for s in samples], [1.0, 2.0, 3.0])
        self.assertEqual(samples[2]["fresh_exec"], fresh[2]["fresh_exec"])
        with self.assertRaises(ValueError):
            workload_exec.exec_samples(fresh, [1.0])

    def test_not_applicable(self):
        def spec(kind, generic=False):
            return VmmSpec(kind, kind, kind, f"/b/{kind}", generic=generic)
        here = __file__  # a path that exists: stands for /dev/vhost-vsock
        self.assertIsNone(workload_exec.not_applicable(spec("sbx"), vhost_vsock="/no/vhost-vsock"))
        self.assertIsNone(workload_exec.not_applicable(spec("qemu"), vhost_vsock=here))
        self.assertEqual(workload_exec.not_applicable(spec("qemu"), vhost_vsock="/no/vhost-vsock"),
                         "no /no/vhost-vsock on this host (modprobe vhost_vsock): qemu's vsock is vhost-vsock")
        for kind in ("kvmtool", "firecracker", "cloud-hypervisor"):
            self.assertIn("no vsock device", workload_exec.not_applicable(spec(kind)))
        self.assertIn("boot workload only", workload_exec.not_applicable(spec("sbx", generic=True)))
        self.assertEqual(workload_exec.paths_of(spec("qemu"))[0].label, "qemu, vhost-vsock")


class RoundsOfSamplesTest(unittest.TestCase):
    def test_one_run_entry_per_sample_and_failures(self):
        calls = {"n": 0}

        def sometimes():
            calls["n"] += 1
            if calls["n"] == 2:
                raise ConnectionError("closed")
            return [{"x": 1.0}, {"x": 2.0}, {"x": 3.0}]
        runs = run_rounds({"sbx": sometimes, "qemu": lambda: {"x": 5.0}}, runs=2, warmup=0, log=lambda _: None,
                          summary=str)
        sbx = [r for r in runs if r["vmm"] == "sbx"]
        self.assertEqual([(r["round"], r.get("sample"), r["ok"]) for r in sbx],
                         [(0, 0, True), (0, 1, True), (0, 2, True), (1, None, False)])
        self.assertEqual(sbx[-1]["error"], "ConnectionError: closed")
        self.assertNotIn("sample", next(r for r in runs if r["vmm"] == "qemu"))
        vmms = [{"name": "sbx", "status": "ok", "reason": None}]
        finish_statuses(vmms, runs)
        self.assertEqual(vmms[0]["status"], "ok")  # one round had data

    def test_no_samples_is_a_failed_run(self):
        runs = run_rounds({"sbx": lambda: []}, runs=1, warmup=0, log=lambda _: None, summary=str)
        self.assertEqual([(r["ok"], r["error"]) for r in runs],
                         [(False, "RuntimeError: the measurement gave no samples")])


class ExecExchangeTest(unittest.TestCase):
    """exec_true against replies written as the agent writes them."""

    def exchange(self, *replies):
        host, guest = socket.socketpair()
        seen = []

        def agent():
            with guest:
                kind, body = agent_frames.recv_frame(guest)
                seen.append((kind, body))
                for reply in replies:
                    guest.sendall(reply)
        thread = threading.Thread(target=agent)
        thread.start()
        try:
            with host:
                host.settimeout(10)
                workload_exec.exec_true(host)
        finally:
            thread.join()
            self.seen = seen

    def json_frame(self, message):
        return _frame(1, json.dumps(message).encode())

    def test_started_output_and_exit(self):
        self.exchange(self.json_frame({"type": "started", "pid": 7}),
                      _frame(2, bytes([1]) + (0).to_bytes(8, "little") + b"out"), _frame(3, bytes([1])),
                      _frame(3, bytes([2])), self.json_frame({"type": "exit", "code": 0, "timed_out": False}))
        kind, body = self.seen[0]
        self.assertEqual(kind, 1)
        self.assertEqual(json.loads(body), {"type": "request", "op": "exec", "argv": ["true"]})

    def test_a_nonzero_exit_or_an_error_raises(self):
        with self.assertRaisesRegex(RuntimeError, "'code': 1"):
            self.exchange(self.json_frame({"type": "started", "pid": 7}),
                          self.json_frame({"type": "exit", "code": 1, "timed_out": False}))
        with self.assertRaisesRegex(RuntimeError, "limit"):
            self.exchange(self.json_frame({"type": "error", "code": "limit", "message": "no thread"}))


class ExecResultsTest(unittest.TestCase):
    def test_schema_statistics_and_ratios(self):
        doc = synthetic_exec()
        self.assertEqual(schema_check.validate(doc), [])
        stats = {(s["vmm"], s["figure"]): s for s in doc["statistics"]}
        self.assertEqual(stats[("sbx", "reused_round_trip")]["n"], 20)  # 4 rounds x 5 execs
        self.assertAlmostEqual(stats[("sbx", "reused_round_trip")]["median"], 82.0)
        ratio = {(r["vmm"], r["figure"]): r["ratio"] for r in doc["ratios"]}
        self.assertAlmostEqual(ratio[("qemu", "reused_round_trip")], 2.0)
        self.assertAlmostEqual(ratio[("qemu", "fresh_connect")], 2.0)
        bad = copy.deepcopy(doc)
        bad["runs"][0]["sample"] = -1
        self.assertTrue(any("sample" in p for p in schema_check.validate(bad)))

    def test_report(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "report"
            text = render_report([("exec.json", synthetic_exec())], out).read_text()
            self.assertIn("## exec — exec.json", text)
            self.assertIn("| QEMU microvm, vhost-vsock | reused_round_trip | **2.00x** [", text)
            self.assertIn("execs 5", text)
            if matplotlib_pyplot() is not None:
                pngs = sorted(p.name for p in out.glob("*.png"))
                self.assertEqual(pngs, ["exec-1-latency.png", "exec-1-parts.png"])
                for name in pngs:
                    self.assertEqual((out / name).read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
                    self.assertIn(f"]({name})", text)


if __name__ == "__main__":
    unittest.main()

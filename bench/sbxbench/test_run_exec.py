"""`sbx-bench run exec` end to end at level 0 without KVM: two guests of
testdata/fake_sbx_vmm.py (as sbx=PATH and sbx@b=PATH, alive side by side,
paused outside their rounds: the fake's agent takes no connection while
paused) answer the execs of `true`; QEMU is given a path that does not
exist (n/a), kvmtool gets no vsock device here (n/a)."""

import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from sbxbench import schema_check, workload_exec
from sbxbench.report_plots import matplotlib_pyplot
from sbxbench.vmm_spec import VmmSpec

BENCH = Path(__file__).resolve().parents[1]
EXECS, RUNS, WARMUP = 4, 2, 1


class RunExecWorkloadTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.fake = self.dir / "fake_sbx_vmm"
        text = (BENCH / "sbxbench" / "testdata" / "fake_sbx_vmm.py").read_text()
        self.fake.write_text(f"#!{sys.executable}\n" + text.split("\n", 1)[1])
        self.fake.chmod(0o755)
        for name in ("vmlinux", "minimal"):
            (self.dir / name).write_bytes(b"not a kernel")

    def tearDown(self):
        self.tmp.cleanup()

    def run_exec(self, vmm):
        out = self.dir / "exec.json"
        cmd = [sys.executable, str(BENCH / "sbx-bench"), "run", "exec", "--vmm", vmm,
               "--kernel", str(self.dir / "vmlinux"), "--initrd", str(self.dir / "minimal"),
               "--runs", str(RUNS), "--warmup", str(WARMUP), "--execs", str(EXECS), "--bootstrap", "200",
               "--out", str(out)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ), timeout=120, check=False)
        doc = json.loads(out.read_text()) if out.exists() else None
        return done, doc, out

    def test_exec(self):
        done, doc, out = self.run_exec(f"sbx={self.fake},sbx@b={self.fake},qemu=/no/such/qemu,kvmtool=/no/lkvm")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        self.assertEqual(doc["workload"], "exec")
        self.assertEqual([f["id"] for f in doc["figures"]], [f.id for f in workload_exec.FIGURES])
        self.assertEqual(doc["parameters"]["execs"], EXECS)
        self.assertEqual(doc["parameters"]["fill_mib"], 0)
        self.assertEqual(doc["parameters"]["memory_mib"], 512)

        status = {v["name"]: (v["status"], v["reason"]) for v in doc["vmms"]}
        self.assertEqual(status["sbx"], ("ok", None))
        self.assertEqual(status["sbx@b"], ("ok", None))
        # The workload's reason first: QEMU's vsock needs /dev/vhost-vsock (absent on some hosts).
        self.assertEqual(status["qemu"], ("n/a", workload_exec.not_applicable(
            VmmSpec("qemu", "qemu", "QEMU microvm", "/no/such/qemu")) or "/no/such/qemu does not exist"))
        self.assertEqual(status["kvmtool"][0], "n/a")
        self.assertIn("no vsock device", status["kvmtool"][1])
        sbx = next(v for v in doc["vmms"] if v["name"] == "sbx")
        self.assertEqual(sbx["label"], "sbx-vmm, hybrid vsock")
        self.assertIn("<token>", " ".join(sbx["argv"]))
        self.assertIn("CONNECT 52", sbx["notes"][0])

        # One run entry per exec: rounds x VMMs x execs, each with its index in the round.
        runs = doc["runs"]
        self.assertTrue(all(r["ok"] for r in runs), [r["error"] for r in runs if not r["ok"]])
        self.assertEqual(len(runs), (WARMUP + RUNS) * 2 * EXECS)
        for name in ("sbx", "sbx@b"):
            for rnd in range(WARMUP + RUNS):
                mine = [r for r in runs if r["vmm"] == name and r["round"] == rnd]
                self.assertEqual([r["sample"] for r in mine], list(range(EXECS)))
                self.assertEqual({r["warmup"] for r in mine}, {rnd < WARMUP})
        self.assertEqual([r["vmm"] for r in runs if r["round"] == 1 and r["sample"] == 0], ["sbx@b", "sbx"])
        for r in runs:
            f = r["figures"]
            self.assertEqual(set(f), {fig.id for fig in workload_exec.FIGURES})
            self.assertAlmostEqual(f["fresh_round_trip"], f["fresh_connect"] + f["fresh_hello"] + f["fresh_exec"])
            self.assertTrue(all(v > 0 for v in f.values()), f)

        # Statistics over every exec of the measured rounds; ratios to sbx.
        stats = {(s["vmm"], s["figure"]): s for s in doc["statistics"]}
        for name in ("sbx", "sbx@b"):
            for fig in workload_exec.FIGURES:
                s = stats[(name, fig.id)]
                self.assertEqual((s["n"], s["unit"]), (RUNS * EXECS, "ms"))
                self.assertLessEqual(s["p5"], s["median"])
                self.assertLessEqual(s["median"], s["p95"])
                self.assertIsNotNone(s["median_ci"])
        ratios = {(r["vmm"], r["baseline"], r["figure"]): r for r in doc["ratios"]}
        for fig in workload_exec.FIGURES:
            r = ratios[("sbx@b", "sbx", fig.id)]
            self.assertEqual((r["n"], r["n_baseline"]), (RUNS * EXECS, RUNS * EXECS))
        self.assertIn("median fresh", done.stdout)

        with open(out.with_suffix(".csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertTrue(any(r["vmm"] == "sbx@b" and r["figure"] == "reused_round_trip" and r["ratio_to_baseline"]
                            for r in rows))

        report = subprocess.run([sys.executable, str(BENCH / "sbx-bench"), "report", str(out), "--out",
                                 str(self.dir / "rep")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=120, check=False)
        self.assertEqual(report.returncode, 0, report.stdout)
        text = (self.dir / "rep" / "report.md").read_text()
        self.assertIn("## exec — exec.json", text)
        self.assertIn("| sbx-vmm, hybrid vsock | reused_round_trip (ms) | **", text)
        self.assertIn(f"| {RUNS * EXECS} |", text)
        self.assertIn("execs 4", text)
        if matplotlib_pyplot() is not None:
            self.assertTrue((self.dir / "rep" / "exec-1-latency.png").exists(), text)


if __name__ == "__main__":
    unittest.main()

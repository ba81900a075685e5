"""`sbx-bench run restore|snapshot|fork` end to end at level 0 without KVM:
testdata/fake_sbx_vmm.py as sbx=PATH speaks sbx-vmm's flags, its hybrid
vsock socket with an agent, and its control socket; QEMU is given a path
that does not exist (n/a), kvmtool and Firecracker have no snapshots (n/a)."""

import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from sbxbench import schema_check

BENCH = Path(__file__).resolve().parents[1]


class FakeSbxVmmCase(unittest.TestCase):
    """A temporary folder with testdata/fake_sbx_vmm.py as `fake` (run by
    this Python) and dummy `vmlinux` and `minimal` files."""

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


class RunSnapshotWorkloadsTest(FakeSbxVmmCase):
    def run_bench(self, workload, vmm, *extra, env=None):
        out = self.dir / f"{workload}.json"
        cmd = [sys.executable, str(BENCH / "sbx-bench"), "run", workload, "--vmm", vmm,
               "--kernel", str(self.dir / "vmlinux"), "--initrd", str(self.dir / "minimal"),
               "--runs", "2", "--warmup", "1", "--fill-mib", "8", "--bootstrap", "200", "--out", str(out), *extra]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **(env or {})}, timeout=120, check=False)
        doc = json.loads(out.read_text()) if out.exists() else None
        return done, doc, out

    def stats(self, doc):
        return {(s["vmm"], s["figure"]): s for s in doc["statistics"]}

    def test_restore(self):
        done, doc, out = self.run_bench("restore", f"sbx={self.fake},qemu=/no/such/qemu,kvmtool=/no/lkvm")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        self.assertEqual(doc["analysis"]["extra_baselines"], ["sbx-lazy", "sbx-private"])
        status = {v["name"]: (v["status"], v["reason"]) for v in doc["vmms"]}
        self.assertEqual(status["qemu"], ("n/a", "/no/such/qemu does not exist"))
        self.assertEqual(status["kvmtool"], ("n/a", "kvmtool (lkvm) has no snapshot or restore"))
        self.assertEqual({status[n][0] for n in ("sbx", "sbx-lazy", "sbx-private")}, {"ok"})
        runs = doc["runs"]
        self.assertEqual(len(runs), 3 * 3)
        self.assertTrue(all(r["ok"] for r in runs), runs)
        self.assertEqual([r["vmm"] for r in runs if r["round"] == 1], ["sbx-lazy", "sbx-private", "sbx"])
        s = self.stats(doc)
        self.assertEqual(s[("sbx", "to_first_instruction")]["median"], 3.5)  # the fake's "VM set up in"
        self.assertEqual(s[("sbx", "to_fully_loaded")]["median"], 3.5)      # eager: at the first instruction
        self.assertEqual(s[("sbx-lazy", "to_fully_loaded")]["median"], 25.5)  # the loader's line
        self.assertNotIn(("sbx-private", "to_fully_loaded"), s)               # loads on touch
        self.assertGreater(s[("sbx-private", "to_agent")]["median"], 40.0)  # the fake's agent starts at 50 ms
        self.assertEqual(s[("sbx", "to_agent")]["n"], 2)
        self.assertTrue(any(r["vmm"] == "sbx-lazy" and r["baseline"] == "sbx" for r in doc["ratios"]))
        argv = next(v["argv"] for v in doc["vmms"] if v["name"] == "sbx-private")
        self.assertEqual(argv[argv.index("--restore-mode") + 1], "private")
        self.assertTrue(argv[argv.index("--restore") + 1].endswith("sbx.raw"))
        self.assertEqual(doc["parameters"]["memory_mib"], 8 + 512)
        self.assertEqual(doc["vmms"][0]["version"], "sbx-vmm 0.0.0-fake")
        report = subprocess.run([sys.executable, str(BENCH / "sbx-bench"), "report", str(out), "--out",
                                 str(self.dir / "rep")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=120, check=False)
        self.assertEqual(report.returncode, 0, report.stdout)
        self.assertIn("| kvmtool (lkvm) | n/a | kvmtool (lkvm) has no snapshot or restore |",
                      (self.dir / "rep" / "report.md").read_text())

    def test_a_failing_path_is_reported_and_the_others_run(self):
        done, doc, _ = self.run_bench("restore", f"sbx={self.fake}", env={"FAKE_SBX_FAIL_MODE": "lazy"})
        self.assertEqual(done.returncode, 0, done.stdout)  # the other paths have data
        status = {v["name"]: v for v in doc["vmms"]}
        self.assertEqual(status["sbx-lazy"]["status"], "failed")
        self.assertIn("exited before the agent answered", status["sbx-lazy"]["reason"])
        self.assertEqual(status["sbx"]["status"], "ok")
        self.assertIn("FAKE_SBX_FAIL_MODE", done.stdout)  # the log's tail is shown
        self.assertEqual(schema_check.validate(doc), [])

    def test_snapshot(self):
        done, doc, out = self.run_bench("snapshot", f"sbx={self.fake},firecracker=/no/fc")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        s = self.stats(doc)
        self.assertEqual(s[("sbx", "save_ms")]["median"], 21.75)  # the fake's pause_ms + write_ms
        self.assertEqual(s[("sbx", "working_set_mib")]["median"], 4.0)  # compressed: 500 ms working set
        self.assertEqual(s[("sbx-raw", "working_set_mib")]["median"], 0.0)
        self.assertEqual(s[("sbx-raw", "touched_mib")]["median"], 260.0)  # half of 520 MiB
        self.assertGreater(s[("sbx-raw", "file_mib")]["median"], 0.0)
        fc = next(v for v in doc["vmms"] if v["name"] == "firecracker")
        self.assertEqual(fc["status"], "n/a")
        self.assertIn("API socket", fc["notes"][0])
        with open(out.with_suffix(".csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertTrue(any(r["vmm"] == "sbx-raw" and r["figure"] == "save_ms" and r["ratio_to_baseline"]
                            for r in rows))

    def test_fork(self):
        done, doc, _ = self.run_bench("fork", f"sbx={self.fake},qemu=/no/such/qemu", "--forks", "3",
                                      "--vmm-cpus", "0")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        self.assertEqual(doc["parameters"]["forks"], 3)
        self.assertEqual(doc["parameters"]["vmm_cpus"], [0])
        s = self.stats(doc)
        a1, a3 = s[("sbx", "answer_1")]["median"], s[("sbx", "answer_3")]["median"]
        self.assertTrue(40.0 < a1 <= a3, (a1, a3))
        self.assertEqual(s[("sbx", "all_answered")]["median"], a3)
        self.assertGreater(s[("sbx", "rss_mib")]["median"], 0.0)
        self.assertLessEqual(s[("sbx", "pss_to_rss")]["median"], 1.0)
        self.assertIn(("sbx", "pss_touched_mib"), s)
        self.assertIn("CPUs 0", " ".join(doc["vmms"][0]["notes"]))


if __name__ == "__main__":
    unittest.main()

"""`sbx-bench run blk` and `run vsock` end to end at level 0 without KVM:
testdata/fake_virtio_vmm.py plays sbx-vmm (and QEMU, for blk) and the
guest script; kvmtool is n/a (a kernel config without CONFIG_VIRTIO_PCI
beside the kernel), Cloud Hypervisor too."""

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from sbxbench import schema_check, workload_blk, workload_vsock
from sbxbench.report_plots import matplotlib_pyplot

BENCH = Path(__file__).resolve().parents[1]
RUNS, WARMUP = 2, 1
HAVE_QEMU_IMG = shutil.which("qemu-img") is not None


class RunVirtioTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.fake = self.dir / "fake_virtio_vmm"
        text = (BENCH / "sbxbench" / "testdata" / "fake_virtio_vmm.py").read_text()
        self.fake.write_text(f"#!{sys.executable}\n" + text.split("\n", 1)[1])
        self.fake.chmod(0o755)
        (self.dir / "bzImage").write_bytes(bytes(0x202) + b"HdrS")
        (self.dir / "initrd").write_bytes(b"not an initramfs")
        (self.dir / "config").write_text("CONFIG_PCI=y\n# CONFIG_VIRTIO_PCI is not set\n")

    def tearDown(self):
        self.tmp.cleanup()

    def run_bench(self, workload, vmm, *extra, env=None):
        out = self.dir / f"{workload}.json"
        cmd = [sys.executable, str(BENCH / "sbx-bench"), "run", workload, "--vmm", vmm,
               "--kernel", str(self.dir / "bzImage"), "--initrd", str(self.dir / "initrd"),
               "--runs", str(RUNS), "--warmup", str(WARMUP), "--bootstrap", "200", "--timeout", "60",
               "--out", str(out), *extra]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **(env or {})}, timeout=120, check=False)
        doc = json.loads(out.read_text()) if out.exists() else None
        return done, doc, out

    def report(self, out):
        done = subprocess.run([sys.executable, str(BENCH / "sbx-bench"), "report", str(out), "--out",
                               str(self.dir / "rep")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120, check=False)
        self.assertEqual(done.returncode, 0, done.stdout)
        return (self.dir / "rep" / "report.md").read_text()

    def test_blk(self):
        formats = "raw,qcow2" if HAVE_QEMU_IMG else "raw"
        done, doc, out = self.run_bench("blk", f"sbx={self.fake},qemu={self.fake},kvmtool={self.fake},"
                                        "cloud-hypervisor=/no/ch", "--formats", formats, "--blk-mib", "16")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        self.assertEqual([f["id"] for f in doc["figures"]], [f.id for f in workload_blk.FIGURES])
        p = doc["parameters"]
        self.assertEqual((p["blk_mib"], p["rand_seconds"], p["disk_mib"], p["formats"], p["memory_mib"]),
                         (16, 10, 256, formats.split(","), 256))
        self.assertIn(p["qemu_cache"], ("none", "writeback"))
        self.assertTrue(p["cmdline"].endswith(" sbxbench.steps=blk sbxbench.blk_mib=16 sbxbench.rand_s=10"))

        status = {v["name"]: v for v in doc["vmms"]}
        paths = ["sbx", "qemu"] + (["sbx-qcow2", "qemu-qcow2"] if HAVE_QEMU_IMG else [])
        for name in paths:
            self.assertEqual(status[name]["status"], "ok", status[name])
        self.assertIn("virtio-pci on x86", status["kvmtool"]["reason"])
        self.assertEqual(status["cloud-hypervisor"]["status"], "n/a")
        sbx, qemu = status["sbx"], status["qemu"]
        self.assertEqual(sbx["argv"][-2], "--disk")
        self.assertIn("-drive", qemu["argv"])
        self.assertTrue(any(n.startswith("the guest saw: SBX-BENCH-QUEUE: max_sectors_kb=1280") for n in sbx["notes"]))
        self.assertIn("the same file for every VMM", sbx["notes"][0])

        runs = doc["runs"]
        self.assertTrue(all(r["ok"] for r in runs), [r["error"] for r in runs if not r["ok"]])
        self.assertEqual(len(runs), (WARMUP + RUNS) * len(paths))
        order = [v["name"] for v in doc["vmms"] if v["status"] == "ok"]
        self.assertEqual([r["vmm"] for r in runs if r["round"] == 1], order[1:] + order[:1])  # rotated
        stats = {(s["vmm"], s["figure"]): s for s in doc["statistics"]}
        self.assertEqual(stats[("sbx", "seq_write_mb_s")]["median"], 200.0)
        self.assertEqual(stats[("qemu", "rand_read_iops")]["n"], RUNS)
        ratios = {(r["vmm"], r["baseline"], r["figure"]): r["ratio"] for r in doc["ratios"]}
        self.assertEqual(ratios[("qemu", "sbx", "seq_read_mb_s")], 1.0)
        if HAVE_QEMU_IMG:
            self.assertEqual(stats[("sbx-qcow2", "seq_write_mb_s")]["median"], 100.0)  # the fake saw the overlay
            self.assertEqual(status["qemu-qcow2"]["baseline"], "sbx-qcow2")
            self.assertEqual(ratios[("sbx-qcow2", "sbx", "rand_read_iops")], 0.5)
            self.assertEqual(ratios[("qemu-qcow2", "sbx-qcow2", "seq_write_mb_s")], 1.0)
            self.assertIn(",backing=on", status["sbx-qcow2"]["argv"][-1])

        with open(out.with_suffix(".csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertTrue(any(r["vmm"] == "kvmtool" and r["status"] == "n/a" for r in rows))
        text = self.report(out)
        self.assertIn("## blk — blk.json", text)
        self.assertIn("| sbx-vmm, raw disk | seq_write_mb_s (MB/s) | **200** [", text)
        if matplotlib_pyplot() is not None:
            self.assertTrue((self.dir / "rep" / "blk-1-throughput.png").exists(), text)

    def test_blk_failed_step(self):
        done, doc, _ = self.run_bench("blk", f"sbx={self.fake}", env={"FAKE_VIRTIO_FAIL": "randread"})
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        sbx = doc["vmms"][0]
        self.assertEqual(sbx["status"], "failed")
        self.assertIn("the guest's steps failed: randread", sbx["reason"])
        self.assertIn("SBX-BENCH-FAIL: randread", done.stdout)  # the output's tail is logged

    def test_vsock(self):
        done, doc, out = self.run_bench("vsock", f"sbx={self.fake},sbx@b={self.fake},kvmtool={self.fake}",
                                        "--vsock-mib", "2")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(schema_check.validate(doc), [])
        self.assertEqual(doc["parameters"]["vsock_mib"], 2)
        self.assertTrue(doc["parameters"]["cmdline"].endswith(" sbxbench.steps=vsock sbxbench.vsock_bytes=2097152"))
        status = {v["name"]: v for v in doc["vmms"]}
        self.assertEqual((status["sbx"]["status"], status["sbx@b"]["status"]), ("ok", "ok"))
        self.assertEqual(status["sbx"]["label"], "sbx-vmm, hybrid vsock")
        self.assertEqual(status["sbx@b"]["version"], "sbx-vmm 0.0.0-fake-virtio")
        self.assertEqual(status["kvmtool"]["status"], "n/a")
        self.assertIn("--vsock", status["sbx"]["argv"])
        runs = doc["runs"]
        self.assertTrue(all(r["ok"] for r in runs), [r["error"] for r in runs if not r["ok"]])
        self.assertEqual(len(runs), (WARMUP + RUNS) * 2)
        for r in runs:
            self.assertEqual(set(r["figures"]), {f.id for f in workload_vsock.FIGURES})
            self.assertTrue(all(v > 0 for v in r["figures"].values()), r)
        self.assertTrue(any(r["vmm"] == "sbx@b" and r["baseline"] == "sbx" for r in doc["ratios"]))
        text = self.report(out)
        self.assertIn("| sbx-vmm @b, hybrid vsock | guest_to_host_mb_s (MB/s) | **", text)
        if matplotlib_pyplot() is not None:
            self.assertTrue((self.dir / "rep" / "vsock-1-throughput.png").exists(), text)

    def test_vsock_failed_transfer(self):
        done, doc, _ = self.run_bench("vsock", f"sbx={self.fake}", "--vsock-mib", "1",
                                      env={"FAKE_VIRTIO_FAIL": "vsock"})
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertEqual(doc["vmms"][0]["status"], "failed")
        self.assertIn("vsock g2h", doc["vmms"][0]["reason"])
        self.assertIn("host side: guest->host: RuntimeError: 524288 of 1048576 bytes arrived", doc["vmms"][0]["reason"])

    def test_usage_errors(self):
        for workload, extra, message in (
                ("vsock", ["--formats", "raw"], "--formats is for the blk workload only"),
                ("boot", ["--vsock-mib", "4"], "--vsock-mib is for the vsock workload only"),
                ("blk", ["--blk-mib", "512"], "--blk-mib exceeds the scratch disk's --disk-mib"),
                ("blk", ["--formats", "vmdk"], "a comma-separated list of raw, qcow2"),
                ("blk", ["--fill-mib", "4"], "--fill-mib and --vmm-cpus are for restore")):
            done, _, _ = self.run_bench(workload, f"sbx={self.fake}", *extra)
            self.assertEqual(done.returncode, 2, (workload, extra, done.stdout))
            self.assertIn(message, done.stdout)


if __name__ == "__main__":
    unittest.main()

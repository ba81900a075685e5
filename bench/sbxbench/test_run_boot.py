"""`sbx-bench run boot` end to end at level 0 without KVM: the fake VMM
(testdata/fake_vmm.sh) as sbx=PATH with the test-only --test-generic-sbx,
and as qemu=PATH (it ignores QEMU's arguments)."""

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from sbxbench import schema_check
from sbxbench.workload_boot import (AGENT_FIGURES, FIGURES, figure_list, guest_timestamps, rotation,
                                   vmm_reported_figures)

BENCH = Path(__file__).resolve().parents[1]


class BootOutputTest(unittest.TestCase):
    def test_sbx_vmm_lines(self):
        # The formats of vmm/vm.cpp and devices/legacy/boot_timer.cpp (base/log.cpp's prefix).
        out = (b"sbx-vmm: info: VM set up in 330.120 ms; starting 1 vCPU(s)\nSBX-BOOTED\n"
               b"sbx-vmm: info: guest boot time: 1784.005 ms\n"
               b"sbx-vmm: info: exit: reboot (guest reset); boot time 1784.005 ms\n")
        self.assertEqual(vmm_reported_figures(out), {"vmm_setup": 330.12, "vmm_boot_timer": 1784.005})

    def test_firecracker_line(self):
        out = b"2026-12-06T03:00:00 [anonymous-instance:main] Guest-boot-time =  123456 us 123 ms,   4567 CPU us 4 CPU ms"
        self.assertEqual(vmm_reported_figures(out), {"vmm_boot_timer": 123.456})
        self.assertEqual(vmm_reported_figures(b"QEMU 7.2 SBX-BOOTED"), {})

    def test_guest_timestamp_hook(self):
        self.assertEqual(guest_timestamps("x\nSBX-TS: kernel_done 812.5\nSBX-TS: Bad 1\n"),
                         {"guest_kernel_done": 812.5})

    def test_init_timestamps(self):
        # images/initramfs/init's lines as the host reads them (ONLCR: \r\n), kernel lines between.
        console = ("SBX-BOOTED\r\nSBX-MEM-KB: 243484\r\nSBX-TS: init 612.345\r\n"
                   "[    0.9] random: crng init done\r\nSBX-AGENT-START: /usr/local/bin/sbx-agent\r\n"
                   "SBX-TS: agent_start 700.5\r\nSBX-AGENT-EXIT: status 3, restarting\r\n"
                   "SBX-TS: agent_start 1300\r\nx SBX-TS: init 1\r\nSBX-TS: init 12 ms\r\n")
        figs = guest_timestamps(console)
        self.assertEqual(set(figs), {"guest_init", "guest_agent_start", "guest_init_to_agent_start"})
        self.assertEqual(figs["guest_init"], 612.345)
        self.assertEqual(figs["guest_agent_start"], 700.5)  # the first start counts, not the restart
        self.assertAlmostEqual(figs["guest_init_to_agent_start"], 88.155)
        self.assertEqual(guest_timestamps("SBX-TS: agent_start 5\n"), {"guest_agent_start": 5.0})

    def test_figure_list_names_the_guest_figures(self):
        runs = [{"figures": {"start_to_init": 1.0, "guest_zeta": 2.0, "guest_init": 3.0,
                             "guest_agent_start": 4.0, "guest_init_to_agent_start": 1.0}}]
        ids = [f["id"] for f in figure_list(runs)]
        self.assertEqual(ids[:len(FIGURES)], [f.id for f in FIGURES])
        self.assertEqual(ids[len(FIGURES):], ["guest_init", "guest_agent_start", "guest_init_to_agent_start",
                                              "guest_zeta"])
        described = {f["id"]: f["description"] for f in figure_list(runs)}
        self.assertIn("/init's first command", described["guest_init"])
        self.assertEqual(described["guest_zeta"], "guest-side timestamp (SBX-TS line)")
        agent_ids = [f["id"] for f in figure_list([], agent=True)]
        self.assertEqual(agent_ids, [f.id for f in AGENT_FIGURES])
        self.assertNotIn("start_to_exit", agent_ids)
        self.assertIn("init_to_agent", agent_ids)


class RotationTest(unittest.TestCase):
    def test_each_round_starts_with_the_next(self):
        names = ["sbx", "qemu", "kvmtool"]
        self.assertEqual([rotation(names, r)[0] for r in range(4)], ["sbx", "qemu", "kvmtool", "sbx"])
        self.assertEqual(rotation(names, 1), ["qemu", "kvmtool", "sbx"])


class RunBootTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.fake = self.dir / "fake_vmm"
        shutil.copy(BENCH / "sbxbench" / "testdata" / "fake_vmm.sh", self.fake)
        self.fake.chmod(0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def run_bench(self, vmm, *extra, env=None):
        out = self.dir / "r.json"
        cmd = [sys.executable, str(BENCH / "sbx-bench"), "run", "boot", "--test-generic-sbx",
               "--vmm", vmm, "--runs", "3", "--warmup", "1", "--timeout", "20", "--bootstrap", "200",
               "--out", str(out), *extra]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **(env or {})}, timeout=120, check=False)
        return done, out

    def test_end_to_end(self):
        done, out = self.run_bench(f"sbx={self.fake},qemu={self.fake},firecracker=/no/such/firecracker")
        self.assertEqual(done.returncode, 0, done.stdout)
        doc = json.loads(out.read_text())
        self.assertEqual(schema_check.validate(doc), [])
        runs = doc["runs"]
        self.assertEqual(len(runs), 2 * (1 + 3))  # 2 usable VMMs x (warm-up + runs)
        self.assertTrue(all(r["ok"] for r in runs), runs)
        self.assertEqual([r["vmm"] for r in runs if r["round"] == 1], ["qemu", "sbx"])  # rotated
        status = {v["name"]: v for v in doc["vmms"]}
        self.assertEqual(status["firecracker"]["status"], "n/a")
        self.assertIn("does not exist", status["firecracker"]["reason"])
        stats = {(s["vmm"], s["figure"]): s for s in doc["statistics"]}
        init = stats[("sbx", "start_to_init")]
        self.assertEqual(init["n"], 3)  # warm-up not counted
        self.assertGreater(init["median"], 40.0)  # the fake sleeps 50 ms before the marker
        self.assertEqual(stats[("sbx", "vmm_setup")]["median"], 1.25)
        self.assertEqual(stats[("sbx", "kernel_to_init")]["median"], 39.25)
        self.assertIn(("sbx", "guest_init_done"), stats)  # the guest-timestamp hook
        self.assertFalse(doc["parameters"]["agent"])
        self.assertIn(("sbx", "start_to_exit"), stats)
        self.assertNotIn(("sbx", "start_to_agent"), stats)
        self.assertTrue(any(r["vmm"] == "qemu" and r["figure"] == "start_to_init" for r in doc["ratios"]))
        self.assertEqual(doc["machine"]["kvm"]["kind"] in ("hardware", "nested", "pvm", "none", "unknown"),
                         True)
        with open(out.with_suffix(".csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertTrue(any(r["vmm"] == "firecracker" and r["status"] == "n/a" for r in rows))
        report = subprocess.run([sys.executable, str(BENCH / "sbx-bench"), "report", str(out),
                                 "--out", str(self.dir / "rep")], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
        self.assertEqual(report.returncode, 0, report.stdout)
        self.assertIn("| Firecracker | n/a |", (self.dir / "rep" / "report.md").read_text())

    def test_failing_vmm_is_reported_not_dropped(self):
        done, out = self.run_bench(f"sbx={self.fake}", env={"FAKE_VMM_FAIL": "1"})
        self.assertEqual(done.returncode, 1, done.stdout)
        doc = json.loads(out.read_text())
        self.assertEqual(doc["vmms"][0]["status"], "failed")
        self.assertIn("exit status 3", doc["vmms"][0]["reason"])
        self.assertEqual(schema_check.validate(doc), [])

    def test_bad_vmm_list_exits_2(self):
        done, _ = self.run_bench("sbx=/x,kvmtool")
        self.assertEqual(done.returncode, 2)
        self.assertIn("kvmtool needs the path of its binary", done.stdout)


if __name__ == "__main__":
    unittest.main()

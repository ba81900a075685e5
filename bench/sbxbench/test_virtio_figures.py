"""The blk and vsock workloads' figures: the guest's result lines (in
sbx-blkbench's and bench/virtio_guest.sh's formats), when a boot counts,
the host's side of the vsock transfers over a Unix socket (the hybrid
convention, a thread playing the guest), run_watched's marker callback,
and synthetic blk and vsock results: schema, ratios to each path's
baseline, CSV and the report with its PNGs."""

import copy
import csv
import io
import os
import socket
import sys
import tempfile
import threading
import unittest
from pathlib import Path

from sbxbench import results, schema_check, workload_blk, workload_vsock
from sbxbench.process_timing import WatchedRun, run_watched
from sbxbench.report_markdown import render_report
from sbxbench.report_plots import matplotlib_pyplot
from sbxbench.test_results import MACHINE
from sbxbench.test_snapshot_results import INPUTS, RUN
from sbxbench.workload_virtio import GuestReport, VsockTransfers, guest_problem, parse_guest

# A console as the guest prints it under sbx-vmm (bench/virtio_guest.sh, steps=blk; CR LF from the serial port).
BLK_CONSOLE = """[    0.412000] virtio_blk virtio0: [vda] 524288 512-byte logical blocks (268 MB/256 MiB)\r
SBX-BOOTED\r
SBX-BENCH-QUEUE: max_sectors_kb=1280 max_hw_sectors_kb=1280 max_segments=254 max_segment_size=4294967295 \
nr_requests=256 scheduler=none\r
SBX-BENCH-FEATURES: 0x0002 0110001001100000000000000000000010000000000000000000000000000000\r
SBX-BENCH: blk-seqwrite bs=1048576 ops=128 bytes=134217728 seconds=3.728000 MBps=36.00 iops=34.3\r
SBX-BENCH: blk-seqread bs=1048576 ops=128 bytes=134217728 seconds=1.694000 MBps=79.23 iops=75.6\r
SBX-BENCH: blk-randread bs=4096 ops=1010 bytes=4136960 seconds=10.000000 MBps=0.41 iops=101.0\r
SBX-RUN-EXIT: 0\r
"""


def watched(status=0, timed_out=False, spawn_error=None):
    return WatchedRun(status=status, timed_out=timed_out, spawn_error=spawn_error)


class GuestLinesTest(unittest.TestCase):
    def test_blk_lines(self):
        report = parse_guest(BLK_CONSOLE)
        self.assertEqual(report.blk, {"seqwrite": (36.0, 34.3), "seqread": (79.23, 75.6), "randread": (0.41, 101.0)})
        self.assertEqual((report.exit_status, report.failures), (0, []))
        self.assertEqual([line.split(":")[0] for line in report.device_lines],
                         ["SBX-BENCH-QUEUE", "SBX-BENCH-FEATURES"])
        self.assertEqual(workload_blk.blk_figures(report.blk),
                         {"seq_write_mb_s": 36.0, "seq_read_mb_s": 79.23, "rand_read_mb_s": 0.41,
                          "rand_read_iops": 101.0})
        self.assertIsNone(guest_problem(watched(), report, 300))

    def test_missing_result(self):
        text = "\n".join(line for line in BLK_CONSOLE.splitlines() if "randread" not in line)
        with self.assertRaisesRegex(RuntimeError, "no sbx-blkbench result for randread"):
            workload_blk.blk_figures(parse_guest(text).blk)

    def test_when_a_boot_does_not_count(self):
        failed = parse_guest("SBX-BENCH-FAIL: randread\nSBX-BENCH-FAIL: vsock g2h\nSBX-RUN-EXIT: 2\n")
        self.assertEqual(guest_problem(watched(), failed, 300), "the guest's steps failed: randread; vsock g2h")
        self.assertEqual(guest_problem(watched(), parse_guest("SBX-RUN-EXIT: 1\n"), 300),
                         "the guest's /sbx-run exited with status 1")
        self.assertEqual(guest_problem(watched(timed_out=True), GuestReport(), 300),
                         "no SBX-RUN-EXIT within 300 s")
        self.assertEqual(guest_problem(watched(status=1), GuestReport(), 300),
                         "the VMM exited with status 1 before the guest's SBX-RUN-EXIT")
        self.assertEqual(guest_problem(watched(timed_out=True), parse_guest("SBX-RUN-EXIT: 0"), 60),
                         "the VMM did not exit within 60 s of its start after the guest's reboot")
        self.assertEqual(guest_problem(watched(spawn_error="cannot start /x: No such file"), GuestReport(), 9),
                         "cannot start /x: No such file")


class VsockTransfersTest(unittest.TestCase):
    """VsockTransfers against a thread playing the guest behind a hybrid
    socket: it sends to UDS_5002, then serves CONNECT 1236 on UDS."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.uds = os.path.join(self.tmp.name, "v.sock")

    def tearDown(self):
        self.tmp.cleanup()

    def guest(self, transfers, send, expect):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(f"{self.uds}_5002")
            s.sendall(bytes(send))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(self.uds)
            server.listen(1)
            transfers.on_marker("h2g")  # the guest printed SBX-VSOCK-LISTENING: 1236
            conn, _ = server.accept()
            with conn:
                line = b""
                while not line.endswith(b"\n"):
                    line += conn.recv(1)
                self.assertEqual(line, b"CONNECT 1236\n")
                conn.sendall(b"OK 1073741824\n")
                got = 0
                while chunk := conn.recv(65536):
                    got += len(chunk)
        self.assertEqual(got, expect)

    def test_both_ways(self):
        nbytes = 3 << 20
        transfers = VsockTransfers(nbytes, uds=self.uds, timeout=30)
        transfers.listen()
        guest = threading.Thread(target=self.guest, args=(transfers, nbytes, nbytes))
        guest.start()
        guest.join(30)
        transfers.finish()
        figs = workload_vsock.vsock_figures(transfers)
        self.assertEqual(set(figs), {"guest_to_host_mb_s", "host_to_guest_mb_s"})
        self.assertTrue(all(v > 0 for v in figs.values()), figs)
        self.assertFalse(os.path.exists(f"{self.uds}_5002"))  # the listener's socket is gone

    def test_short_transfer_is_an_error(self):
        transfers = VsockTransfers(1 << 20, uds=self.uds, timeout=30)
        transfers.listen()
        guest = threading.Thread(target=self.guest, args=(transfers, 1000, 1 << 20))
        guest.start()
        guest.join(30)
        transfers.finish()
        with self.assertRaisesRegex(RuntimeError, r"guest->host: RuntimeError: 1000 of 1048576 bytes arrived"):
            workload_vsock.vsock_figures(transfers)

    def test_no_guest(self):
        transfers = VsockTransfers(1 << 20, uds=self.uds, timeout=30)
        transfers.listen()
        transfers.finish(wait=5)
        with self.assertRaisesRegex(RuntimeError, "guest->host"):
            workload_vsock.vsock_figures(transfers)


class MarkerCallbackTest(unittest.TestCase):
    def test_called_once_per_marker_while_reading(self):
        seen = []
        script = "print('x'); print('SBX-VSOCK-LISTENING: 1236', flush=True); print('SBX-VSOCK-LISTENING: 1236')"
        run = run_watched([sys.executable, "-c", script], markers={"h2g": b"SBX-VSOCK-LISTENING: 1236"},
                          timeout=30, on_marker=seen.append)
        self.assertEqual((run.status, seen), (0, ["h2g"]))


def _vmm(name, kind, label, status="ok", reason=None, baseline=None):
    entry = {"name": name, "kind": kind, "label": label, "path": f"/b/{kind}", "status": status, "reason": reason,
             "argv": [f"/b/{kind}"] if status == "ok" else None, "notes": [], "version": None}
    if baseline:
        entry["baseline"] = baseline
    return entry


def _doc(workload, figures, vmms, per_vmm, runs=4, **params):
    samples = [{"vmm": name, "round": r, "position": pos, "warmup": False, "ok": True, "error": None,
                "figures": figs(r)} for r in range(runs) for pos, (name, figs) in enumerate(per_vmm.items())]
    machine = copy.deepcopy(MACHINE)
    machine["kvm"]["kind"] = "nested"
    return results.new_result(
        workload=workload, parameters={"runs": runs, "warmup": 0, "cpus": 1, "memory_mib": 256, **params},
        figures=figures, breakdowns=[], vmms=vmms, runs=samples, machine=machine, run_facts=RUN, inputs=INPUTS,
        resamples=300, confidence=0.95, seed=17)


def synthetic_blk():
    def disk(write, read, iops):
        return lambda r: {"seq_write_mb_s": write + r, "seq_read_mb_s": read - r, "rand_read_iops": iops + 2 * r,
                          "rand_read_mb_s": (iops + 2 * r) * 4096 / 1e6}
    vmms = [_vmm("sbx", "sbx", "sbx-vmm, raw disk"),
            _vmm("sbx-qcow2", "sbx", "sbx-vmm, qcow2 overlay", baseline="sbx"),
            _vmm("qemu", "qemu", "QEMU microvm, raw disk"),
            _vmm("qemu-qcow2", "qemu", "QEMU microvm, qcow2 overlay", baseline="sbx-qcow2"),
            _vmm("kvmtool", "kvmtool", "kvmtool (lkvm), raw disk", "n/a", "no CONFIG_VIRTIO_PCI"),
            _vmm("kvmtool-qcow2", "kvmtool", "kvmtool (lkvm), qcow2 overlay", "n/a", "reads no backing file")]
    per_vmm = {"sbx": disk(36.0, 80.0, 100.0), "sbx-qcow2": disk(22.0, 78.0, 90.0),
               "qemu": disk(38.0, 67.0, 91.0), "qemu-qcow2": disk(41.0, 145.0, 178.0)}
    return _doc("blk", workload_blk.figure_list(), vmms, per_vmm, blk_mib=128, rand_seconds=10, disk_mib=256,
                formats=["raw", "qcow2"], qemu_cache="writeback", cmdline="console=ttyS0 sbxbench.steps=blk")


def synthetic_vsock():
    def way(g2h, h2g):
        return lambda r: {"guest_to_host_mb_s": g2h + r, "host_to_guest_mb_s": h2g - r}
    vmms = [_vmm("sbx", "sbx", "sbx-vmm, hybrid vsock"), _vmm("qemu", "qemu", "QEMU microvm, vhost-vsock")]
    return _doc("vsock", workload_vsock.figure_list(), vmms, {"sbx": way(9.7, 7.5), "qemu": way(8.1, 8.3)},
                vsock_mib=64)


class VirtioResultsTest(unittest.TestCase):
    def test_schema(self):
        for doc in (synthetic_blk(), synthetic_vsock()):
            self.assertEqual(schema_check.validate(doc), [])
        doc = synthetic_blk()
        doc["vmms"][1]["baseline"] = 3
        self.assertTrue(schema_check.validate(doc))

    def test_each_path_to_its_baseline(self):
        doc = synthetic_blk()
        pairs = {(r["vmm"], r["baseline"]) for r in doc["ratios"]}
        self.assertEqual(pairs, {("sbx-qcow2", "sbx"), ("qemu", "sbx"), ("qemu-qcow2", "sbx-qcow2")})
        ratio = {(r["vmm"], r["figure"]): r for r in doc["ratios"]}
        # medians of rounds 0..3: sbx-qcow2 write 23.5, sbx 37.5; qemu-qcow2 read 143.5 / sbx-qcow2 76.5
        self.assertAlmostEqual(ratio[("sbx-qcow2", "seq_write_mb_s")]["ratio"], 23.5 / 37.5)
        self.assertAlmostEqual(ratio[("qemu-qcow2", "seq_read_mb_s")]["ratio"], 143.5 / 76.5)
        rows = list(csv.DictReader(io.StringIO(results.csv_text(doc))))
        row = next(r for r in rows if r["vmm"] == "qemu-qcow2" and r["figure"] == "seq_read_mb_s")
        self.assertAlmostEqual(float(row["ratio_to_baseline"]), 143.5 / 76.5, places=4)
        self.assertEqual(next(r for r in rows if r["vmm"] == "kvmtool-qcow2")["status"], "n/a")
        units = {r["figure"]: r["unit"] for r in rows if r["vmm"] == "sbx"}
        self.assertEqual(units["rand_read_iops"], "IOPS")
        self.assertEqual(units["seq_write_mb_s"], "MB/s")


class VirtioReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name) / "report"

    def tearDown(self):
        self.tmp.cleanup()

    def test_markdown(self):
        text = render_report([("blk.json", synthetic_blk()), ("vsock.json", synthetic_vsock())], self.out).read_text()
        self.assertIn("## blk — blk.json", text)
        self.assertIn("| sbx-vmm, raw disk | rand_read_iops (IOPS) | **103** [", text)
        self.assertIn("| QEMU microvm, qcow2 overlay | sbx-vmm, qcow2 overlay | seq_read_mb_s | **1.88x** [", text)
        self.assertIn("| kvmtool (lkvm), qcow2 overlay | n/a | reads no backing file |", text)
        self.assertIn("formats ['raw', 'qcow2']", text)
        self.assertIn("## vsock — vsock.json", text)
        self.assertIn("| QEMU microvm, vhost-vsock | host_to_guest_mb_s | **", text)
        self.assertIn("faster for MB/s and IOPS", text)

    @unittest.skipUnless(matplotlib_pyplot() is not None, "python3-matplotlib is not installed")
    def test_pngs(self):
        text = render_report([("blk.json", synthetic_blk()), ("vsock.json", synthetic_vsock())], self.out).read_text()
        pngs = sorted(p.name for p in self.out.glob("*.png"))
        self.assertEqual(pngs, ["blk-1-throughput.png", "vsock-2-throughput.png"])
        for name in pngs:
            self.assertEqual((self.out / name).read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
            self.assertIn(f"]({name})", text)


if __name__ == "__main__":
    unittest.main()

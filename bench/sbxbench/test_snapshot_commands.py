"""The snapshot workloads' command lines, n/a handling and usage errors."""

import contextlib
import io
import unittest
from pathlib import Path

from sbxbench import cli, workload_fork, workload_restore, workload_snapshot
from sbxbench.guest_agent import redacted
from sbxbench.snapshot_commands import Guest, not_applicable, qemu_argv, sbx_origin_argv, sbx_restore_argv
from sbxbench.vmm_spec import parse_vmm_list
from sbxbench.workload_common import SnapshotOptions, plan_paths

ROOT = "/src/tree"
GUEST = Guest(kernel="/k/vmlinux", image="/k/minimal.cpio.gz", cpus=1, memory_mib=1536,
              cmdline="console=ttyS0 quiet", token="f00d", workdir="/tmp/w")


def spec(text):
    return parse_vmm_list(text, root=Path(ROOT))[0]


def value_after(argv, flag):
    return argv[argv.index(flag) + 1]


class SbxCommandTest(unittest.TestCase):
    def test_origin(self):
        argv = sbx_origin_argv(spec("sbx=/b/sbx-vmm"), GUEST, vsock_uds="/tmp/w/v.sock",
                               control="/tmp/w/control.sock", console="/tmp/w/c.log")
        self.assertEqual(argv[0], "/b/sbx-vmm")
        for flag, value in (("--kernel", "/k/vmlinux"), ("--initrd", "/k/minimal.cpio.gz"), ("--memory", "1536"),
                            ("--cpus", "1"), ("--vsock", "cid=3,uds=/tmp/w/v.sock"),
                            ("--control", "/tmp/w/control.sock"), ("--snapshot-dir", "/tmp/w"),
                            ("--console", "file:/tmp/w/c.log"), ("--cmdline", "console=ttyS0 quiet sbx.token=f00d")):
            self.assertEqual(value_after(argv, flag), value, flag)

    def test_restore_modes(self):
        for mode in ("eager", "lazy", "private"):
            argv = sbx_restore_argv(spec("sbx=/b/sbx-vmm"), "/tmp/w/vm.raw", mode, cid=11, vsock_uds="/tmp/w/f1.sock",
                                    console="/tmp/w/f1.log", control="/tmp/w/f1-control.sock")
            self.assertEqual(argv[:5], ["/b/sbx-vmm", "--restore", "/tmp/w/vm.raw", "--restore-mode", mode])
            self.assertEqual(value_after(argv, "--vsock"), "cid=11,uds=/tmp/w/f1.sock")
            self.assertNotIn("--memory", argv)  # memory and vCPUs come from the snapshot
        with self.assertRaises(ValueError):
            sbx_restore_argv(spec("sbx"), "/s", "eventually", cid=3, vsock_uds="/u", console="/c", control="/x")


class QemuCommandTest(unittest.TestCase):
    def test_origin_is_vmruns_machine(self):
        argv = qemu_argv(spec("qemu=/usr/bin/qemu-system-x86_64"), GUEST, console="/tmp/w/q.log",
                         qmp="/tmp/w/qmp.sock")
        self.assertEqual(argv[0], "/usr/bin/qemu-system-x86_64")
        self.assertIn("microvm,x-option-roms=off,rtc=off,acpi=off,pit=on,pic=on", argv)
        self.assertEqual(value_after(argv, "-serial"), "file:/tmp/w/q.log")
        self.assertEqual(value_after(argv, "-m"), "1536")
        self.assertEqual(value_after(argv, "-qmp"), "unix:/tmp/w/qmp.sock,server=on,wait=off")
        self.assertIn("vhost-vsock-device,guest-cid=3", argv)
        self.assertIn("virtio-mmio.force-legacy=false", argv)
        self.assertTrue(value_after(argv, "-append").endswith("sbx.token=f00d pci=off"))
        self.assertNotIn("-incoming", argv)

    def test_incoming_with_its_own_cid(self):
        argv = qemu_argv(spec("qemu=/q"), GUEST, console="/c", qmp="/tmp/w/q2.sock", cid=12, incoming=True)
        self.assertEqual(argv[-2:], ["-incoming", "defer"])
        self.assertIn("vhost-vsock-device,guest-cid=12", argv)
        self.assertNotIn("vhost-vsock-device,guest-cid=3", argv)

    def test_redacted(self):
        argv = qemu_argv(spec("qemu=/q"), GUEST, console="/c", qmp="/s")
        self.assertFalse(any("f00d" in a for a in redacted(argv, "f00d")))
        self.assertTrue(any("sbx.token=<token>" in a for a in redacted(argv, "f00d")))


class NotApplicableTest(unittest.TestCase):
    def test_reasons(self):
        self.assertIn("no snapshot", not_applicable(spec("kvmtool=/k")))
        self.assertIn("API socket", not_applicable(spec("firecracker=/f")))
        self.assertIn("API socket", not_applicable(spec("cloud-hypervisor=/c")))
        self.assertIsNone(not_applicable(spec("sbx")))
        self.assertIsNone(not_applicable(spec("qemu")))

    def test_paths_and_na_entries(self):
        specs = parse_vmm_list("sbx=/b/sbx,qemu=/no/qemu,firecracker=/f", root=Path(ROOT))
        logged = []
        unusable = {"sbx": None, "qemu": "/no/qemu does not exist", "firecracker": None}
        vmms, runnable = plan_paths(specs, workload_restore.paths_of, unusable=lambda s: unusable[s.name],
                                    log=logged.append)
        self.assertEqual([v["name"] for v in vmms], ["sbx", "sbx-lazy", "sbx-private", "qemu", "firecracker"])
        self.assertEqual(list(runnable), ["sbx"])
        by = {v["name"]: v for v in vmms}
        self.assertEqual((by["qemu"]["status"], by["qemu"]["reason"]), ("n/a", "/no/qemu does not exist"))
        self.assertEqual(by["firecracker"]["status"], "n/a")
        self.assertIn("--no-api", by["firecracker"]["notes"][0])  # the reason is in the notes too
        self.assertEqual(by["sbx-private"]["kind"], "sbx")
        self.assertEqual(len(logged), 2)
        self.assertEqual([p.name for p in workload_snapshot.paths_of(specs[0])], ["sbx", "sbx-raw"])
        self.assertEqual([p.name for p in workload_fork.paths_of(specs[0])], ["sbx"])

    def test_missing_sbx_makes_every_path_na(self):
        specs = parse_vmm_list("sbx=/no/sbx", root=Path(ROOT))
        vmms, runnable = plan_paths(specs, workload_restore.paths_of, unusable=lambda s: "missing",
                                    log=lambda _: None)
        self.assertEqual([(v["name"], v["status"]) for v in vmms],
                         [("sbx", "n/a"), ("sbx-lazy", "n/a"), ("sbx-private", "n/a")])
        self.assertEqual(runnable, {})

    def test_guest_memory(self):
        opts = SnapshotOptions(kernel="k", image="i", cpus=1, memory_mib=None, fill_mib=1024, runs=1, warmup=0)
        self.assertEqual(opts.guest_memory_mib, 1536)  # snapshot_runner.py: FILL_MIB + 512
        self.assertEqual(SnapshotOptions("k", "i", 1, 800, 64, 1, 0).guest_memory_mib, 800)


class CliTest(unittest.TestCase):
    def run_cli(self, *argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                status = cli.main(["sbx-bench", *argv])
            except SystemExit as e:  # argparse
                status = e.code
        return status, err.getvalue()

    def test_usage_errors(self):
        for argv, message in ((["run", "restore", "--confinement"], "boot workload only"),
                              (["run", "fork", "--test-generic-sbx", "--vmm", "sbx=/x"], "boot workload only"),
                              (["run", "boot", "--fill-mib", "4"], "restore, snapshot, fork, density and exec"),
                              (["run", "restore", "--budget-mib", "4"], "--budget-mib is for the density workload"),
                              (["run", "fork", "--max-sandboxes", "4"], "is for the density workload only"),
                              (["run", "density", "--max-sandboxes", "0"], "--max-sandboxes"),
                              (["run", "snapshot"], "images/build minimal"),
                              (["run", "exec"], "images/build minimal"),
                              (["run", "exec", "--execs", "0"], "--execs"),
                              (["run", "restore", "--kernel", "/no/k", "--initrd", "/no/i"], "no such file"),
                              (["run", "fork", "--vmm-cpus", "a"], "CPU numbers")):
            status, err = self.run_cli(*argv)
            self.assertEqual(status, 2, argv)
            self.assertIn(message, err, argv)

    def test_cpu_list(self):
        self.assertEqual(cli._cpu_list("1,0,1"), (0, 1))


if __name__ == "__main__":
    unittest.main()

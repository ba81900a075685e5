"""The blk and vsock workloads' command lines and n/a reasons, per VMM
(virtio_commands.py), and their paths (raw, qcow2)."""

import json
import tempfile
import unittest
from pathlib import Path

from sbxbench import workload_blk, workload_vsock
from sbxbench.virtio_commands import (CLOUD_HYPERVISOR, FIRECRACKER_QCOW2, KVMTOOL_QCOW2, Devices, device_command,
                                      lacks_virtio_pci, not_applicable)
from sbxbench.vmm_commands import BootConfig, NotApplicable
from sbxbench.vmm_spec import parse_vmm_list
from sbxbench.workload_common import plan_paths
from sbxbench.workload_virtio import guest_cmdline

ROOT = Path("/src/tree")
ELF = b"\x7fELF" + bytes(60)
BZIMAGE = bytes(0x202) + b"HdrS" + bytes(60)


class _Fixture(unittest.TestCase):
    """A vmlinux and a bzImage in a temporary folder, and a spec per VMM."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.vmlinux, self.bzimage = self.dir / "vmlinux", self.dir / "bzImage"
        self.vmlinux.write_bytes(ELF)
        self.bzimage.write_bytes(BZIMAGE)
        self.specs = {s.name: s for s in parse_vmm_list(
            "sbx=/b/sbx-vmm,qemu=/usr/bin/qemu-system-x86_64,kvmtool=/k/lkvm,firecracker=/fc/firecracker,"
            "cloud-hypervisor=/ch/cloud-hypervisor", root=ROOT)}

    def tearDown(self):
        self.tmp.cleanup()

    def cfg(self, kernel=None):
        return BootConfig(str(kernel or self.vmlinux), "/i/initrd", "console=ttyS0 sbxbench.steps=blk", 1, 256,
                          str(self.dir))


class VirtioCommandsTest(_Fixture):
    def test_sbx(self):
        raw = device_command(self.specs["sbx"], self.cfg(), Devices(disk="/w/disk.img"))
        self.assertEqual(raw.argv, ["/b/sbx-vmm", "--kernel", str(self.vmlinux), "--initrd", "/i/initrd", "--cpus",
                                    "1", "--memory", "256", "--cmdline", "console=ttyS0 sbxbench.steps=blk",
                                    "--disk", "/w/disk.img"])
        qcow2 = device_command(self.specs["sbx"], self.cfg(), Devices(disk="/w/sbx-qcow2.qcow2", disk_format="qcow2"))
        self.assertEqual(qcow2.argv[-2:], ["--disk", "/w/sbx-qcow2.qcow2,backing=on"])
        vsock = device_command(self.specs["sbx"], self.cfg(), Devices(vsock=True, vsock_uds="/w/sbx.vsock"))
        self.assertEqual(vsock.argv[-2:], ["--vsock", "cid=3,uds=/w/sbx.vsock"])
        self.assertNotIn("--disk", vsock.argv)

    def test_qemu(self):
        cmd = device_command(self.specs["qemu"], self.cfg(), Devices(disk="/w/q.qcow2", disk_format="qcow2",
                                                                    qemu_cache="writeback"))
        argv = cmd.argv
        self.assertEqual(argv[:3], ["/usr/bin/qemu-system-x86_64", "-M",
                                    "microvm,x-option-roms=off,rtc=off,acpi=off,pit=on,pic=on"])
        self.assertEqual(argv[argv.index("-append") + 1], "console=ttyS0 sbxbench.steps=blk pci=off")
        self.assertIn("virtio-mmio.force-legacy=false", argv)
        self.assertEqual(argv[argv.index("-drive") + 1],
                         "file=/w/q.qcow2,format=qcow2,if=none,id=d0,cache=writeback,aio=io_uring")
        self.assertEqual(argv[-2:], ["-device", "virtio-blk-device,drive=d0"])
        self.assertIn("drive cache=writeback,aio=io_uring", cmd.notes)
        vsock = device_command(self.specs["qemu"], self.cfg(), Devices(vsock=True)).argv
        self.assertEqual(vsock[-2:], ["-device", "vhost-vsock-device,guest-cid=3"])
        self.assertNotIn("-drive", vsock)

    def test_kvmtool(self):
        cmd = device_command(self.specs["kvmtool"], self.cfg(self.bzimage), Devices(disk="/w/disk.img"))
        self.assertEqual(cmd.argv[:2], ["/k/lkvm", "run"])
        self.assertEqual(cmd.argv[-2:], ["-d", "/w/disk.img"])
        self.assertEqual(cmd.env, {"HOME": str(self.dir)})
        vsock = device_command(self.specs["kvmtool"], self.cfg(self.bzimage), Devices(vsock=True))
        self.assertEqual(vsock.argv[-2:], ["--vsock", "3"])
        self.assertEqual(device_command(self.specs["kvmtool"], self.cfg(self.bzimage),
                                        Devices(disk="/w/k.qcow2", disk_format="qcow2")), NotApplicable(KVMTOOL_QCOW2))

    def test_firecracker_config_file(self):
        cmd = device_command(self.specs["firecracker"], self.cfg(), Devices(disk="/w/disk.img"))
        config = json.loads(Path(cmd.argv[cmd.argv.index("--config-file") + 1]).read_text())
        self.assertEqual(config["drives"], [{"drive_id": "scratch", "path_on_host": "/w/disk.img",
                                             "is_root_device": False, "is_read_only": False}])
        self.assertTrue(config["boot-source"]["boot_args"].endswith("sbxbench.steps=blk pci=off"))
        cmd = device_command(self.specs["firecracker"], self.cfg(), Devices(vsock=True, vsock_uds="/w/fc.vsock"))
        config = json.loads(Path(cmd.argv[cmd.argv.index("--config-file") + 1]).read_text())
        self.assertEqual(config["vsock"], {"guest_cid": 3, "uds_path": "/w/fc.vsock"})
        qcow2 = Devices(disk="/w/f", disk_format="qcow2")
        self.assertEqual(device_command(self.specs["firecracker"], self.cfg(), qcow2), NotApplicable(FIRECRACKER_QCOW2))
        self.assertIsInstance(device_command(self.specs["firecracker"], self.cfg(self.bzimage),
                                             Devices(disk="/w/disk.img")), NotApplicable)

    def test_cloud_hypervisor_is_not_wired_up(self):
        self.assertEqual(device_command(self.specs["cloud-hypervisor"], self.cfg(), Devices(vsock=True)),
                         NotApplicable(CLOUD_HYPERVISOR))
        self.assertEqual(not_applicable(self.specs["cloud-hypervisor"], kernel=str(self.vmlinux), vsock=False),
                         CLOUD_HYPERVISOR)


class NotApplicableTest(_Fixture):
    def test_kvmtool_needs_a_bzimage_and_virtio_pci(self):
        kvmtool = self.specs["kvmtool"]
        self.assertIn("bzImage only", not_applicable(kvmtool, kernel=str(self.vmlinux), vsock=False))
        self.assertIsNone(not_applicable(kvmtool, kernel=str(self.bzimage), vsock=False))  # no config beside it
        (self.dir / "config").write_text("CONFIG_PCI=y\n# CONFIG_VIRTIO_PCI is not set\nCONFIG_VIRTIO_MMIO=y\n")
        self.assertEqual(lacks_virtio_pci(str(self.bzimage)), str(self.dir / "config"))
        reason = not_applicable(kvmtool, kernel=str(self.bzimage), vsock=False)
        self.assertIn("virtio-pci on x86", reason)
        self.assertIn(f"no CONFIG_VIRTIO_PCI ({self.dir / 'config'})", reason)
        (self.dir / "config").write_text("CONFIG_PCI=y\nCONFIG_VIRTIO_PCI=y\n")
        self.assertIsNone(not_applicable(kvmtool, kernel=str(self.bzimage), vsock=False))

    def test_vhost_vsock_device(self):
        missing = str(self.dir / "no-vhost-vsock")
        for name in ("qemu", "kvmtool"):
            reason = not_applicable(self.specs[name], kernel=str(self.bzimage if name == "kvmtool" else self.vmlinux),
                                    vsock=True, vhost_vsock=missing)
            self.assertEqual(reason, f"no {missing} on this host (modprobe vhost_vsock): "
                                     f"{self.specs[name].label}'s vsock is vhost-vsock")
            self.assertIsNone(not_applicable(self.specs[name], kernel=str(self.bzimage if name == "kvmtool"
                                                                          else self.vmlinux),
                                             vsock=False, vhost_vsock=missing))
        # sbx-vmm and Firecracker: the hybrid socket, no vhost.
        self.assertIsNone(not_applicable(self.specs["sbx"], kernel=str(self.vmlinux), vsock=True, vhost_vsock=missing))
        self.assertIsNone(not_applicable(self.specs["firecracker"], kernel=str(self.vmlinux), vsock=True,
                                         vhost_vsock=missing))
        self.assertIn("ELF vmlinux", not_applicable(self.specs["firecracker"], kernel=str(self.bzimage), vsock=True))

    def test_generic_sbx(self):
        spec = parse_vmm_list("sbx=/fake", root=ROOT, generic_sbx=True)[0]
        self.assertEqual(not_applicable(spec, kernel=str(self.vmlinux), vsock=False),
                         "--test-generic-sbx is for the boot workload only")


class PathsTest(unittest.TestCase):
    def test_blk_paths_and_their_baselines(self):
        specs = parse_vmm_list("sbx,sbx@b=/old/sbx-vmm,qemu,kvmtool=/k/lkvm", root=ROOT)
        formats = ("raw", "qcow2")
        vmms, runnable = plan_paths(specs, lambda s: workload_blk.paths_of(s, formats), unusable=lambda s: None,
                                    log=lambda _: None, unsupported=lambda s: None,
                                    path_kinds=("sbx", "qemu", "kvmtool"),
                                    path_problem=lambda s, p: workload_blk.path_problem(s, p, "/usr/bin/qemu-img"))
        self.assertEqual([(v["name"], v["label"], v["status"]) for v in vmms], [
            ("sbx", "sbx-vmm, raw disk", "ok"), ("sbx-qcow2", "sbx-vmm, qcow2 overlay", "ok"),
            ("sbx@b", "sbx-vmm @b, raw disk", "ok"), ("sbx@b-qcow2", "sbx-vmm @b, qcow2 overlay", "ok"),
            ("qemu", "QEMU microvm, raw disk", "ok"), ("qemu-qcow2", "QEMU microvm, qcow2 overlay", "ok"),
            ("kvmtool", "kvmtool (lkvm), raw disk", "ok"), ("kvmtool-qcow2", "kvmtool (lkvm), qcow2 overlay", "n/a")])
        self.assertEqual(vmms[-1]["reason"], KVMTOOL_QCOW2)
        self.assertEqual([p.name for p in runnable["kvmtool"]], ["kvmtool"])
        self.assertEqual(workload_blk.qcow2_baseline("sbx-qcow2"), "sbx")
        self.assertEqual(workload_blk.qcow2_baseline("qemu-qcow2"), "sbx-qcow2")
        # qcow2 alone: its path is named as the VMM (sbx stays the baseline).
        self.assertEqual([p.name for p in workload_blk.paths_of(specs[0], ("qcow2",))], ["sbx"])
        self.assertEqual(workload_blk.path_problem(specs[2], workload_blk.paths_of(specs[2], formats)[1], None),
                         "qemu-img (it makes the qcow2 overlays) is not on PATH")

    def test_vsock_paths(self):
        specs = parse_vmm_list("sbx,qemu,firecracker=/fc", root=ROOT)
        self.assertEqual([workload_vsock.paths_of(s)[0].label for s in specs],
                         ["sbx-vmm, hybrid vsock", "QEMU microvm, vhost-vsock", "Firecracker, hybrid vsock"])

    def test_guest_cmdline(self):
        self.assertEqual(guest_cmdline("console=ttyS0 quiet", {"steps": "blk", "blk_mib": 64, "rand_s": 4}),
                         "console=ttyS0 quiet sbxbench.steps=blk sbxbench.blk_mib=64 sbxbench.rand_s=4")


if __name__ == "__main__":
    unittest.main()

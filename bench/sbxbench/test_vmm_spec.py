"""The --vmm parser and the VMMs' boot command lines."""

import tempfile
import unittest
from pathlib import Path

from sbxbench.vmm_commands import BootConfig, NotApplicable, boot_command, version_command
from sbxbench.vmm_spec import VmmListError, parse_vmm_list, unusable_reason

ROOT = Path("/src/tree")


class VmmListTest(unittest.TestCase):
    def test_defaults_and_paths(self):
        specs = parse_vmm_list("sbx, qemu=/opt/qemu ,kvmtool=/opt/lkvm,firecracker=/fc,"
                               "cloud-hypervisor=/ch", root=ROOT)
        self.assertEqual([s.name for s in specs], ["sbx", "qemu", "kvmtool", "firecracker", "cloud-hypervisor"])
        self.assertEqual(specs[0].path, "/src/tree/build/host-tools/sbx-vmm/sbx-vmm")
        self.assertEqual(specs[1].path, "/opt/qemu")
        self.assertEqual(specs[2].path, "/opt/lkvm")
        self.assertFalse(any(s.generic for s in specs))

    def test_another_build_of_a_vmm_by_tag(self):
        specs = parse_vmm_list("sbx,sbx@before=/old/sbx-vmm,qemu", root=ROOT)
        self.assertEqual([(s.name, s.kind) for s in specs], [("sbx", "sbx"), ("sbx@before", "sbx"), ("qemu", "qemu")])
        self.assertEqual(specs[1].path, "/old/sbx-vmm")
        self.assertEqual(specs[1].label, "sbx-vmm @before")
        cfg = BootConfig(kernel="/k", initrd="/i", cpus=1, memory_mib=256, cmdline="quiet", workdir="/tmp")
        self.assertEqual(boot_command(specs[1], cfg).argv[0], "/old/sbx-vmm")
        for text, message in (("sbx@before", "needs the path of that build"), ("sbx@Old=/x", "a tag after @"),
                              ("sbx@=/x", "a tag after @"), ("xen@a=/x", "unknown VMM 'xen'"),
                              ("sbx@a=/x,sbx@a=/y", "named twice")):
            with self.assertRaisesRegex(VmmListError, message):
                parse_vmm_list(text, root=ROOT)

    def test_unknown_vmm_is_a_clear_error(self):
        with self.assertRaisesRegex(VmmListError, r"unknown VMM 'xen'.*known: sbx, qemu"):
            parse_vmm_list("sbx,xen", root=ROOT)

    def test_kvmtool_without_path_is_a_clear_error(self):
        with self.assertRaisesRegex(VmmListError, r"kvmtool needs the path of its binary.*kvmtool=/"):
            parse_vmm_list("sbx,kvmtool", root=ROOT)
        for name in ("firecracker", "cloud-hypervisor"):
            with self.assertRaisesRegex(VmmListError, f"{name} needs the path"):
                parse_vmm_list(name, root=ROOT)

    def test_other_mistakes(self):
        for text, message in (("", "empty entry"), ("sbx,,qemu", "empty entry"),
                              ("sbx,sbx", "named twice"), ("kvmtool=", "empty path"),
                              ("qemu", None)):
            if message is None:
                parse_vmm_list(text, root=ROOT)
                continue
            with self.assertRaisesRegex(VmmListError, message):
                parse_vmm_list(text, root=ROOT)

    def test_generic_needs_sbx(self):
        self.assertTrue(parse_vmm_list("sbx=/fake", root=ROOT, generic_sbx=True)[0].generic)
        with self.assertRaisesRegex(VmmListError, "needs sbx=PATH"):
            parse_vmm_list("qemu", root=ROOT, generic_sbx=True)

    def test_unusable(self):
        self.assertIn("does not exist", unusable_reason(parse_vmm_list("kvmtool=/no/such", root=ROOT)[0]))
        self.assertIsNone(unusable_reason(parse_vmm_list("qemu=/bin/sh", root=ROOT)[0]))


class BootCommandTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = Path(self.tmp.name)
        (d / "vmlinux").write_bytes(b"\x7fELF" + bytes(60))
        (d / "bzImage").write_bytes(b"MZ" + bytes(62))
        self.cfg = BootConfig(str(d / "vmlinux"), str(d / "initrd"), "console=ttyS0 quiet", 2, 256, str(d))

    def tearDown(self):
        self.tmp.cleanup()

    def _spec(self, text):
        return parse_vmm_list(text, root=ROOT)[0]

    def test_same_inputs_everywhere(self):
        for text in ("sbx", "qemu=/q", "kvmtool=/k", "firecracker=/f", "cloud-hypervisor=/c"):
            cmd = boot_command(self._spec(text), self.cfg)
            joined = " ".join(cmd.argv)
            if "firecracker" not in text:  # Firecracker takes them in its config file
                self.assertIn(self.cfg.kernel, cmd.argv, text)
                self.assertIn("console=ttyS0 quiet", joined, text)

    def test_kvmtool_flags(self):
        argv = boot_command(self._spec("kvmtool=/k"), self.cfg).argv
        self.assertEqual(argv[:2], ["/k", "run"])
        for flag, value in (("-k", self.cfg.kernel), ("-i", self.cfg.initrd), ("-c", "2"), ("-m", "256"),
                            ("--console", "serial")):
            self.assertEqual(argv[argv.index(flag) + 1], value)
        self.assertEqual(version_command(self._spec("kvmtool=/k")), ["/k", "version"])

    def test_firecracker_config_and_elf_only(self):
        cmd = boot_command(self._spec("firecracker=/f"), self.cfg)
        config = Path(cmd.argv[cmd.argv.index("--config-file") + 1]).read_text()
        self.assertIn('"vcpu_count": 2', config)
        self.assertIn("pci=off", config)
        bz = BootConfig(self.cfg.kernel.replace("vmlinux", "bzImage"), *list(self.cfg.__dict__.values())[1:])
        self.assertIsInstance(boot_command(self._spec("firecracker=/f"), bz), NotApplicable)

    def test_cloud_hypervisor_is_stopped_at_the_marker(self):
        self.assertTrue(boot_command(self._spec("cloud-hypervisor=/c"), self.cfg).stop_at_marker)
        self.assertIn("pci=off", boot_command(self._spec("qemu=/q"), self.cfg).argv[-1])


if __name__ == "__main__":
    unittest.main()

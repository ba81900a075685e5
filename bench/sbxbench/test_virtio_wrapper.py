"""bench/virtio's plumbing without a harness or a VM: the script runs in a
copy of the tree whose tests/nested runs the command directly, whose
images/build, tests/guest/tools/build and tests/guest/make-initrd make
dummy files, with testdata/fake_virtio_vmm.py as the build's sbx-vmm."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from sbxbench.test_snapshot_wrapper import IMAGES, NESTED

BENCH = Path(__file__).resolve().parents[1]

TOOLS = """#!/bin/sh
# tests/guest/tools/build stand-in: a folder with dummy guest tools.
d="$(dirname "$0")/../../../dummy-tools"; mkdir -p "$d"
for t in sbx-vsock sbx-blkbench sbx-hostile; do echo dummy > "$d/$t"; done
cd "$d" && pwd
"""
MAKE_INITRD = """#!/bin/sh
# tests/guest/make-initrd stand-in: record the arguments, write OUT.
echo "make-initrd $*" >> "$(dirname "$0")/../../nested.log"
echo not-an-initramfs > "$3"
"""


@unittest.skipUnless(os.path.exists("/usr/bin/python3"), "bench/virtio runs /usr/bin/python3")
class VirtioWrapperTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        for d in ("bench", "tests/guest/tools", "images", "build/host-tools/sbx-vmm"):
            (self.root / d).mkdir(parents=True)
        for name in ("virtio", "virtio_guest.sh"):
            shutil.copy(BENCH / name, self.root / "bench" / name)
        (self.root / "bench" / "sbx-bench").symlink_to(BENCH / "sbx-bench")
        fake = self.root / "build" / "host-tools" / "sbx-vmm" / "sbx-vmm"
        fake.write_text(f"#!{sys.executable}\n" + (BENCH / "sbxbench" / "testdata" / "fake_virtio_vmm.py")
                        .read_text().split("\n", 1)[1])
        for path, text in ((fake, None), (self.root / "tests" / "nested", NESTED),
                           (self.root / "images" / "build", IMAGES),
                           (self.root / "tests" / "guest" / "tools" / "build", TOOLS),
                           (self.root / "tests" / "guest" / "make-initrd", MAKE_INITRD)):
            if text:
                path.write_text(text)
            path.chmod(0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def run_virtio(self, *args):
        env = {**os.environ, "SBX_BUILD_DIR": str(self.root / "build")}
        env.pop("SBX_BENCH_VMMS", None)
        return subprocess.run(["bash", str(self.root / "bench" / "virtio"), *args], cwd=self.root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False)

    def test_blk_and_vsock_then_the_report(self):
        out = self.root / "out"
        done = self.run_virtio("--no-build", "--runs", "1", "--warmup", "0", "--vmm", "sbx,qemu=/no/such/qemu",
                               "--formats", "raw", "--blk-mib", "8", "--vsock-mib", "1", "--out-dir", str(out),
                               "--", "--bootstrap", "100")
        self.assertEqual(done.returncode, 0, done.stdout)
        blk = json.loads((out / "bench-blk.json").read_text())
        vsock = json.loads((out / "bench-vsock.json").read_text())
        self.assertEqual((blk["parameters"]["blk_mib"], blk["parameters"]["formats"]), (8, ["raw"]))
        self.assertEqual(vsock["parameters"]["vsock_mib"], 1)
        for doc in (blk, vsock):
            sbx = next(v for v in doc["vmms"] if v["name"] == "sbx")
            self.assertEqual((sbx["status"], sbx["path"]),
                             ("ok", str(self.root / "build/host-tools/sbx-vmm/sbx-vmm")))
            self.assertEqual(doc["inputs"]["initrd"]["path"], str(out / "bench-virtio-initrd.cpio.gz"))
        report = (out / "bench-virtio-report" / "report.md").read_text()
        self.assertIn("## blk — bench-blk.json", report)
        self.assertIn("## vsock — bench-vsock.json", report)
        log = (self.root / "nested.log").read_text().splitlines()
        self.assertEqual(len(log), 2, log)
        self.assertTrue(log[0].startswith("make-initrd ") and log[0].endswith(
            "bench/virtio_guest.sh " + f"{out}/bench-virtio-initrd.cpio.gz {self.root}/dummy-tools/sbx-blkbench "
            f"{self.root}/dummy-tools/sbx-vsock"), log[0])
        # One harness run for both; 4 boots (2 VMMs, 1 round, blk raw + vsock): 600 + 4 x 330 s.
        self.assertTrue(log[1].startswith("nested --timeout 1920:"), log[1])
        self.assertIn("run blk --vmm", log[1])
        self.assertIn("--formats raw --blk-mib 8 --rand-seconds 10 --disk-mib 256 --qemu-cache auto", log[1])
        self.assertIn("--vsock-mib 1 --out", log[1])

    def test_usage_errors(self):
        for args, message in ((["--workloads", "boot"], "--workloads takes blk and vsock, not boot"),
                              (["--format", "elf"], "--format is vmlinux or bzimage"),
                              (["--bogus"], "unknown argument --bogus")):
            done = self.run_virtio("--no-build", *args)
            self.assertEqual(done.returncode, 2, done.stdout)
            self.assertIn(message, done.stdout)


if __name__ == "__main__":
    unittest.main()

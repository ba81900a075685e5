"""bench/snapshot's plumbing without a harness or a VM: the script runs in a
copy of the tree whose tests/nested runs the command directly and whose
images/build names dummy files, with testdata/fake_sbx_vmm.py as the
build's sbx-vmm."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]

NESTED = """#!/bin/sh
# tests/nested stand-in: record the options, run CMD here.
if [ "$1" = --print-mode ]; then echo direct; exit 0; fi
opts=
while [ "$1" != -- ]; do opts="$opts $1"; shift; done
shift
{ printf 'nested%s:' "$opts"; printf ' %s' "$@" | tr '\\n' ' '; echo; } >> "$(dirname "$0")/../nested.log"
exec "$@"
"""
IMAGES = """#!/bin/sh
# images/build stand-in: a dummy file per image.
f="$(dirname "$0")/../dummy-$1"; echo not-an-image > "$f"; echo "$f"
"""


@unittest.skipUnless(os.path.exists("/usr/bin/python3"), "bench/snapshot runs /usr/bin/python3")
class SnapshotWrapperTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        for d in ("bench", "tests", "images", "build/host-tools/sbx-vmm"):
            (self.root / d).mkdir(parents=True)
        shutil.copy(BENCH / "snapshot", self.root / "bench" / "snapshot")
        (self.root / "bench" / "sbx-bench").symlink_to(BENCH / "sbx-bench")
        fake = self.root / "build" / "host-tools" / "sbx-vmm" / "sbx-vmm"
        fake.write_text(f"#!{sys.executable}\n" + (BENCH / "sbxbench" / "testdata" / "fake_sbx_vmm.py")
                        .read_text().split("\n", 1)[1])
        for path, text in ((fake, None), (self.root / "tests" / "nested", NESTED),
                           (self.root / "images" / "build", IMAGES)):
            if text:
                path.write_text(text)
            path.chmod(0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def test_all_workloads_then_the_report(self):
        env = {**os.environ, "SBX_BUILD_DIR": str(self.root / "build")}
        env.pop("SBX_BENCH_VMMS", None)
        done = subprocess.run(["bash", str(self.root / "bench" / "snapshot"), "8", "--runs", "1", "--warmup", "0",
                               "--vmm", "sbx,qemu=/no/such/qemu", "--workloads", "restore,snapshot,fork",
                               "--forks", "3", "--out-dir", str(self.root / "out"), "--", "--bootstrap", "100"],
                              cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120, check=False)
        self.assertEqual(done.returncode, 0, done.stdout)
        out = self.root / "out"
        for workload in ("restore", "snapshot", "fork"):
            doc = json.loads((out / f"bench-{workload}.json").read_text())
            self.assertEqual(doc["parameters"]["fill_mib"], 8)
            sbx = next(v for v in doc["vmms"] if v["name"] == "sbx")
            self.assertEqual((sbx["status"], sbx["path"]), ("ok", str(self.root / "build/host-tools/sbx-vmm/sbx-vmm")))
        self.assertEqual(json.loads((out / "bench-fork.json").read_text())["parameters"]["vmm_cpus"], [0])
        report = (out / "bench-snapshot-report" / "report.md").read_text()
        for workload in ("restore", "snapshot", "fork"):
            self.assertIn(f"## {workload} — bench-{workload}.json", report)
        log = (self.root / "nested.log").read_text().splitlines()
        self.assertEqual(len(log), 2)  # restore and snapshot in one harness run, fork in another
        self.assertTrue(log[0].startswith("nested --mem 8192 --cpus 2 --timeout 3600:"), log[0])
        self.assertIn(" restore snapshot --vmm ", log[0])
        self.assertTrue(log[1].startswith("nested --mem 8192 --cpus 3 --timeout 2700:"), log[1])
        self.assertIn("--forks 3 --vmm-cpus 0 --bootstrap 100", log[1])

    def test_bad_workload_is_a_usage_error(self):
        done = subprocess.run(["bash", str(self.root / "bench" / "snapshot"), "--workloads", "boot"],
                              cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=60, check=False)
        self.assertEqual(done.returncode, 2)
        self.assertIn("--workloads takes restore, snapshot, fork and density, not boot", done.stdout)

    def test_density_runs_beside_restore_and_snapshot(self):
        env = {**os.environ, "SBX_BUILD_DIR": str(self.root / "build")}
        done = subprocess.run(["bash", str(self.root / "bench" / "snapshot"), "--runs", "1", "--warmup", "0",
                               "--vmm", "sbx", "--workloads", "density", "--out-dir", str(self.root / "out"), "--",
                               "--max-sandboxes", "2", "--bootstrap", "100"],
                              cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120, check=False)
        self.assertEqual(done.returncode, 0, done.stdout)
        doc = json.loads((self.root / "out" / "bench-density.json").read_text())
        self.assertEqual((doc["parameters"]["max_sandboxes"], doc["parameters"]["fill_mib"]), (2, 0))
        log = (self.root / "nested.log").read_text().splitlines()
        self.assertEqual(len(log), 1)
        self.assertTrue(log[0].startswith("nested --mem 8192 --cpus 2 --timeout 2700:"), log[0])
        self.assertIn("## density — bench-density.json",
                      (self.root / "out" / "bench-snapshot-report" / "report.md").read_text())


if __name__ == "__main__":
    unittest.main()

"""bench/boot's plumbing without a harness or a VM (--agent: the minimal
image and the flag reach sbx-bench): the script runs in a copy of the tree
whose tests/nested runs the command directly, whose scripts do nothing and
whose images/build names dummy files, with testdata/fake_sbx_vmm.py given
as sbx=PATH."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from sbxbench.test_boot_agent import _fake_sbx_vmm

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
# images/build stand-in: a dummy file per image; records what it built.
echo "$1 SBX_AGENT=${SBX_AGENT:-}" >> "$(dirname "$0")/../images.log"
f="$(dirname "$0")/../dummy-$1"; echo not-an-image > "$f"; echo "$f"
"""


@unittest.skipUnless(os.path.exists("/usr/bin/python3"), "bench/boot runs /usr/bin/python3")
class BootWrapperAgentTest(unittest.TestCase):
    """bench/boot --agent in a copy of the tree whose tests/nested runs the
    command directly, whose scripts do nothing and whose images/build names
    dummy files; the fake sbx-vmm given as sbx=PATH."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        for d in ("bench", "tests", "images", "scripts", "build"):
            (self.root / d).mkdir()
        shutil.copy(BENCH / "boot", self.root / "bench" / "boot")
        (self.root / "bench" / "sbx-bench").symlink_to(BENCH / "sbx-bench")
        self.fake = _fake_sbx_vmm(self.root / "fake_sbx_vmm")
        for path, text in ((self.root / "tests" / "nested", NESTED), (self.root / "images" / "build", IMAGES),
                           (self.root / "scripts" / "install-deps", "#!/bin/sh\n"),
                           (self.root / "scripts" / "build", "#!/bin/sh\n")):
            path.write_text(text)
            path.chmod(0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def test_agent_boots_the_minimal_image(self):
        env = {**os.environ, "SBX_BUILD_DIR": str(self.root / "build")}
        env.pop("SBX_AGENT", None)
        done = subprocess.run(["bash", str(self.root / "bench" / "boot"), "--agent", "--runs", "1", "--warmup", "0",
                               "--vmm", f"sbx={self.fake}", "--", "--bootstrap", "100"],
                              cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120, check=False)
        self.assertEqual(done.returncode, 0, done.stdout)
        images = (self.root / "images.log").read_text().splitlines()
        self.assertEqual(images, ["vmlinux SBX_AGENT=", f"minimal SBX_AGENT={self.root}/build/guest-agent/sbx-agent"])
        log = (self.root / "nested.log").read_text()
        self.assertIn("--initrd images/../dummy-minimal ", log)
        self.assertIn(" --agent --bootstrap 100", log)
        doc = json.loads((self.root / "build" / "bench-boot-agent.json").read_text())
        self.assertTrue(doc["parameters"]["agent"])
        self.assertEqual(doc["vmms"][0]["status"], "ok")
        self.assertTrue((self.root / "build" / "bench-boot-agent-report" / "report.md").exists())


if __name__ == "__main__":
    unittest.main()

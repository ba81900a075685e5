#!/usr/bin/env python3
"""Compatibility shim: the boot benchmark now lives in the sbx-bench package
(bench/sbxbench/workload_boot.py; QEMU's machine in vmm_commands.py). This
keeps the old command line working and runs `sbx-bench run boot`:

  bench/boot_runner.py --vmm SBX_VMM [--qemu QEMU] --kernel K --initrd I
                       [--runs N] [--cpus N] [--memory MIB] [--timeout S] [--confinement]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from sbxbench.cli import main  # noqa: E402


def translate(argv: list[str]) -> list[str]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vmm", required=True, help="the sbx-vmm binary")
    ap.add_argument("--qemu", default="qemu-system-x86_64")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--runs", default="5")
    ap.add_argument("--cpus", default="1")
    ap.add_argument("--memory", default="256")
    ap.add_argument("--timeout", default="120")
    ap.add_argument("--confinement", action="store_true")
    a = ap.parse_args(argv)
    return ["sbx-bench", "run", "boot", "--vmm", f"sbx={a.vmm},qemu={a.qemu}", "--kernel", a.kernel,
            "--initrd", a.initrd, "--runs", a.runs, "--cpus", a.cpus, "--memory", a.memory,
            "--timeout", a.timeout] + (["--confinement"] if a.confinement else [])


if __name__ == "__main__":
    sys.exit(main(translate(sys.argv[1:])))

#!/usr/bin/env python3
"""Compatibility shim: the snapshot benchmark now lives in the sbx-bench
package (bench/sbxbench/workload_restore.py, workload_snapshot.py and
workload_fork.py; the guest and QMP parts in guest_agent.py, qmp.py and
snapshot_origin.py). This keeps the old command line working and runs
`sbx-bench run restore` and `run snapshot` once each (no warm-up), with
the results in WORKDIR/bench-restore.json and bench-snapshot.json:

  bench/snapshot_runner.py --kernel K --image MINIMAL --sbx-vmm PATH --workdir DIR
                           [--fill-mib N] [--vmms sbx,qemu]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from sbxbench.cli import main  # noqa: E402


def translate(argv: list[str]) -> list[list[str]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--sbx-vmm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--fill-mib", default="1024")
    ap.add_argument("--vmms", default="sbx,qemu")
    a = ap.parse_args(argv)
    vmm = ",".join(f"sbx={a.sbx_vmm}" if v == "sbx" else v for v in a.vmms.split(","))
    return [["sbx-bench", "run", workload, "--vmm", vmm, "--kernel", a.kernel, "--initrd", a.image,
             "--fill-mib", a.fill_mib, "--runs", "1", "--warmup", "0",
             "--out", os.path.join(a.workdir, f"bench-{workload}.json")]
            for workload in ("restore", "snapshot")]


if __name__ == "__main__":
    status = 0
    for command in translate(sys.argv[1:]):
        status |= main(command)
    sys.exit(status)

#!/usr/bin/env python3
"""Virtio benchmark runner: boots the same kernel, initramfs (with
bench/virtio_guest.sh as /sbx-run) and scratch disk under sbx-vmm and under
QEMU -M microvm, alternating, and prints virtio-blk sequential write/read
throughput, 4 KiB random-read IOPS and virtio-vsock throughput in both
directions, side by side with the ratio sbx/QEMU (above 1: sbx-vmm faster).
With qcow2 in --formats, every run also boots each VMM on a fresh qcow2
overlay of the scratch disk (qemu-img create -b DISK -F raw), and the
qcow2 rows add the ratio of sbx-vmm's qcow2 to its raw numbers.
Runs wherever /dev/kvm can boot Linux, e.g. as the CMD of tests/nested. The
earlier runner: bench/virtio now runs sbx-bench's blk and vsock workloads
(rotated rounds, every VMM of --vmm, intervals; docs/benchmarks.md); this
one remains for its one-boot-does-both table. The VM plumbing (device
flags for either VMM, the vsock host side) is tests/guest/vmrun.py's."""

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "guest"))
import vmrun  # noqa: E402  (the path is set just above)

# (key, label, unit) in print order; blk numbers come from the guest's
# sbx-blkbench lines, vsock numbers are timed on the host side.
METRICS = [
    ("blk-seqwrite", "virtio-blk seq write 1M", "MB/s"),
    ("blk-seqread", "virtio-blk seq read 1M", "MB/s"),
    ("blk-randread", "virtio-blk rand read 4K", "IOPS"),
    ("blk-randread-mbps", "virtio-blk rand read 4K", "MB/s"),
    ("vsock-g2h", "virtio-vsock guest->host", "MB/s"),
    ("vsock-h2g", "virtio-vsock host->guest", "MB/s"),
]
BENCH_LINE = re.compile(r"SBX-BENCH: (blk-\w+) .*MBps=([0-9.]+) iops=([0-9.]+)")


def run_once(args, vmm, disk, image_format="raw"):
    """One boot; returns {metric: value} (missing metrics: the step failed).
    For qcow2 the guest's disk is a fresh overlay on `disk`."""
    workdir = tempfile.mkdtemp(prefix="sbx-bench.", dir="/tmp")
    results = {}
    try:
        if image_format == "qcow2":
            overlay = os.path.join(workdir, "overlay.qcow2")
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", disk, "-F", "raw", overlay],
                           check=True)
            disk = overlay
        machine = vmrun.Machine(vmm, args.kernel, args.initrd, sbx_vmm=args.vmm_path,
                                qemu=args.qemu, cpus=args.cpus, memory=args.memory,
                                disks=[(disk, False)], vsock=True,
                                vsock_uds=os.path.join(workdir, "v.sock"),
                                qemu_cache=args.qemu_cache, qemu_aio=args.qemu_aio)
        vs = vmrun.VsockHost(vmm, workdir)
        n = args.vsock_bytes
        listener = vs.listen(5002)
        listener.settimeout(args.timeout)

        def guest_to_host():
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(120)
                buf = bytearray(1 << 20)
                got, t0 = 0, time.monotonic()
                while got < n:
                    r = conn.recv_into(buf)
                    if r == 0:
                        break
                    got += r
                secs = time.monotonic() - t0
            if got != n:
                raise RuntimeError(f"guest -> host: {got} of {n} bytes arrived")
            results["vsock-g2h"] = n / 1e6 / secs
            vmrun.host("BENCH-VSOCK-G2H", f"bytes={n} seconds={secs:.3f} MBps={n / 1e6 / secs:.2f}")

        def host_to_guest(_port):
            with vs.connect(1236) as conn:
                conn.settimeout(120)
                chunk = bytes(1 << 20)
                t0 = time.monotonic()
                sent = 0
                while sent < n:
                    part = chunk[:min(len(chunk), n - sent)]
                    conn.sendall(part)
                    sent += len(part)
                # Until the guest has read everything and closed.
                conn.shutdown(socket.SHUT_WR)
                vmrun.recv_all(conn)
                secs = time.monotonic() - t0
            results["vsock-h2g"] = n / 1e6 / secs
            vmrun.host("BENCH-VSOCK-H2G", f"bytes={n} seconds={secs:.3f} MBps={n / 1e6 / secs:.2f}")

        machine.spawn("bench-g2h", guest_to_host)
        machine.on("SBX-VSOCK-LISTENING: 1236", host_to_guest)
        machine.start()
        status = machine.wait(args.timeout, silence=args.timeout)
        machine.join_handlers()
        for line in machine.output:
            m = BENCH_LINE.search(line)
            if m:
                if m.group(1) == "blk-randread":
                    results["blk-randread"] = float(m.group(3))
                    results["blk-randread-mbps"] = float(m.group(2))
                else:
                    results[m.group(1)] = float(m.group(2))
        if status != 0 or "SBX-RUN-EXIT: 0" not in machine.output:
            vmrun.host("BENCH-FAILED", f"{vmm}: status {status}; results so far {results}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vmm", dest="vmm_path", required=True, help="path of sbx-vmm")
    ap.add_argument("--qemu", default="qemu-system-x86_64")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True, help="with bench/virtio_guest.sh as /sbx-run")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=256)
    ap.add_argument("--disk-mib", type=int, default=256)
    ap.add_argument("--disk-dir", default="/tmp",
                    help="where the scratch image lives (default /tmp: tmpfs in the harness)")
    ap.add_argument("--vsock-bytes", type=int, default=64 << 20)
    ap.add_argument("--qemu-cache", default="auto",
                    help="auto: none (O_DIRECT) when the image's file system allows it, else writeback")
    ap.add_argument("--qemu-aio", default="io_uring")
    ap.add_argument("--only", choices=("sbx", "qemu"))
    ap.add_argument("--formats", default="raw,qcow2",
                    help="disk formats, comma-separated: raw, qcow2 (an overlay on the raw disk)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per boot")
    args = ap.parse_args()

    # One scratch image for both VMMs, fully allocated (no holes that read
    # as zeros without touching memory).
    disk = os.path.join(args.disk_dir, f"sbx-bench-disk.{os.getpid()}.img")
    with open(disk, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, args.disk_mib << 20)
    cache = args.qemu_cache
    if cache == "auto":
        cache = "none" if vmrun.direct_io_works(disk) else "writeback"
    args.qemu_cache = cache

    vmms = [args.only] if args.only else ["sbx", "qemu"]
    formats = [f for f in args.formats.split(",") if f]
    configs = [(v, f) for f in formats for v in vmms]
    results = {c: {k: [] for k, _, _ in METRICS} for c in configs}
    failed = {c: 0 for c in configs}
    try:
        for run in range(args.runs):
            # Alternate who goes first, so neither always gets a cold cache.
            for vmm, image_format in (configs if run % 2 == 0 else configs[::-1]):
                vmrun.host("BENCH-RUN", f"{run + 1}/{args.runs} {vmm} {image_format}")
                r = run_once(args, vmm, disk, image_format)
                if len(r) < len(METRICS):
                    failed[(vmm, image_format)] += 1
                for k, v in r.items():
                    results[(vmm, image_format)][k].append(v)
    finally:
        os.unlink(disk)

    print()
    print(f"kernel {args.kernel}")
    print(f"initrd {args.initrd}")
    print(f"{args.cpus} vCPU, {args.memory} MiB; scratch disk {args.disk_mib} MiB in {args.disk_dir}; "
          f"QEMU drive cache={cache},aio={args.qemu_aio}; vsock {args.vsock_bytes >> 20} MiB each way; "
          f"{args.runs} runs each, alternating; runs with a failed step: "
          + ", ".join(f"{v} {f} {failed[(v, f)]}" for v, f in configs))

    def med(vmm, image_format, key):
        values = results.get((vmm, image_format), {}).get(key)
        return statistics.median(values) if values else None

    def fmt(v):
        return f"{v:10.1f}" if v is not None else f"{'n/a':>10}"

    def ratio(a, b):
        return f"{a / b:8.2f}x" if a and b else f"{'n/a':>9}"

    print(f"{'median':<34} {'unit':<5} {'sbx-vmm':>10} {'qemu':>10} {'sbx/qemu':>9} {'qcow2/raw':>9}")
    for image_format in formats:
        for key, label, unit in METRICS:
            if image_format == "qcow2" and key.startswith("vsock"):
                continue  # the disk format does not touch vsock
            s, q = med("sbx", image_format, key), med("qemu", image_format, key)
            row = f"{label + ('' if image_format == 'raw' else ' (qcow2)'):<34} {unit:<5} {fmt(s)} {fmt(q)} {ratio(s, q)}"
            if image_format == "qcow2":
                row += f" {ratio(s, med('sbx', 'raw', key))}"
            print(row)
    return 0 if not any(failed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

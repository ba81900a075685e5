#!/usr/bin/env python3
"""Boot-time benchmark runner: boots the same kernel and initramfs with
sbx-vmm and with QEMU -M microvm, alternating, and reports the time from
process start to the guest init's first line (SBX-BOOTED on the serial
console) and to process exit. Runs wherever /dev/kvm can boot Linux; bench/boot
puts it inside the nested harness when the host needs that.

With --confinement it also boots sbx-vmm with `--seccomp off` and jailed
(`--jail`, an unprivileged uid; docs/security.md) in the same rotation and
prints what the filters and the jail add to the start (issue 14)."""

import argparse
import os
import shutil
import tempfile
import select
import statistics
import subprocess
import sys
import time

MARKER = b"SBX-BOOTED"


def boot_once(argv, timeout):
    """Returns (seconds to the marker, seconds to exit, the VMM's own boot-timer
    ms or None), or None when the boot failed or hung (its output is shown)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    marker_at = None
    timer_ms = None
    output = b""
    timed_out = False
    while True:
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            timed_out = True
            proc.kill()
            break
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready:
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        output += chunk
        if marker_at is None and MARKER in output:
            marker_at = time.monotonic() - start
        if timer_ms is None and b"guest boot time:" in output:
            tail = output.split(b"guest boot time:")[1].split()
            if len(tail) > 1:  # the number and its unit have both arrived
                timer_ms = float(tail[0])
    status = proc.wait()
    exit_at = time.monotonic() - start
    if timed_out or status != 0 or marker_at is None:
        why = f"no exit within {timeout:.0f} s" if timed_out else f"status {status}"
        sys.stderr.write(output[-3000:].decode(errors="replace"))
        sys.stderr.write(f"\nboot failed ({why}): {' '.join(argv[:1])}\n")
        return None
    return marker_at, exit_at, timer_ms


def describe(name, samples):
    med = statistics.median(samples)
    return f"{name:<26} median {med * 1000:9.1f} ms   min {min(samples) * 1000:9.1f}   max {max(samples) * 1000:9.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmm", required=True)
    ap.add_argument("--qemu", default="qemu-system-x86_64")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per boot")
    ap.add_argument("--confinement", action="store_true",
                    help="also boot sbx-vmm with --seccomp off and jailed, and print the difference")
    args = ap.parse_args()

    cmdline = ("console=ttyS0 reboot=k panic=1 nomodule i8042.noaux i8042.nomux "
               "i8042.nopnp i8042.dumbkbd quiet")
    ours = [args.vmm, "--kernel", args.kernel, "--initrd", args.initrd, "--cpus", str(args.cpus),
            "--memory", str(args.memory), "--cmdline", cmdline]
    # The closest QEMU machine to ours: microvm without ACPI, firmware option
    # ROMs or RTC, legacy PIC/PIT, one 16550 on ttyS0, and an i8042 so that
    # reboot=k ends the process (microvm has none by default and the
    # kernel's reboot fallbacks then take over a minute). It has no PCI host
    # (sbx-vmm's carries pvpanic), so its guest skips the PCI probe: pci=off.
    qemu = [args.qemu, "-M", "microvm,x-option-roms=off,rtc=off,acpi=off,pit=on,pic=on",
            "-enable-kvm", "-cpu", "host", "-smp", str(args.cpus), "-m", str(args.memory),
            "-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio", "-device", "i8042",
            "-no-reboot",
            "-kernel", args.kernel, "-initrd", args.initrd, "-append", cmdline + " pci=off"]

    variants = {"sbx-vmm": ours, "qemu": qemu}
    jail_dir = None
    if args.confinement:
        # The jail's folder, writable by its uid; the VMM needs nothing else in it.
        jail_dir = tempfile.mkdtemp(prefix="sbx-bench-jail.")
        os.chown(jail_dir, 4242, 4343)
        variants["seccomp-off"] = ours + ["--seccomp", "off"]
        variants["jailed"] = ours + ["--jail", jail_dir, "--jail-user", "4242:4343"]
    try:
        measure(args, variants)
    finally:
        if jail_dir:
            shutil.rmtree(jail_dir, ignore_errors=True)


def measure(args, variants):
    results = {name: [] for name in variants}
    failures = {name: 0 for name in variants}
    timers = []
    # Warm the page cache for the binaries and the images, then alternate.
    for argv in variants.values():
        boot_once(argv, args.timeout)
    for run in range(args.runs):
        for name, argv in variants.items():
            result = boot_once(argv, args.timeout)
            if result is None:
                failures[name] += 1
                print(f"run {run + 1}/{args.runs} {name:<8} FAILED", flush=True)
                continue
            marker, exit_at, timer = result
            results[name].append((marker, exit_at))
            print(f"run {run + 1}/{args.runs} {name:<11} init after {marker * 1000:8.1f} ms, "
                  f"exit after {exit_at * 1000:8.1f} ms", flush=True)
            if timer is not None and name == "sbx-vmm":
                timers.append(timer / 1000)
    if any(not r for r in results.values()):
        raise SystemExit(f"no successful boots to compare (failures: {failures})")

    print()
    print(f"kernel {args.kernel}")
    print(f"initrd {args.initrd}")
    print(f"{args.cpus} vCPU, {args.memory} MiB, {args.runs} runs each, alternating; failed boots: "
          + ", ".join(f"{name} {n}" for name, n in failures.items()))
    for name in variants:
        print(describe(f"{name}: start -> init", [m for m, _ in results[name]]))
        print(describe(f"{name}: start -> exit", [e for _, e in results[name]]))
    if timers:
        print(describe("sbx-vmm: boot timer", timers))
    ours_med = statistics.median(m for m, _ in results["sbx-vmm"])
    qemu_med = statistics.median(m for m, _ in results["qemu"])
    print(f"ratio start->init qemu/sbx-vmm: {qemu_med / ours_med:.2f}x")
    ours_exit = statistics.median(e for _, e in results["sbx-vmm"])
    qemu_exit = statistics.median(e for _, e in results["qemu"])
    print(f"ratio start->exit qemu/sbx-vmm: {qemu_exit / ours_exit:.2f}x")
    if "seccomp-off" in results:
        off = statistics.median(m for m, _ in results["seccomp-off"])
        jailed = statistics.median(m for m, _ in results["jailed"])
        print(f"start->init, seccomp filters on minus off: {(ours_med - off) * 1000:+.1f} ms "
              f"({ours_med / off:.3f}x); jailed minus not: {(jailed - ours_med) * 1000:+.1f} ms "
              f"({jailed / ours_med:.3f}x)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Boot-time benchmark runner: boots the same kernel and initramfs with
sbx-vmm and with QEMU -M microvm, alternating, and reports the time from
process start to the guest init's first line (SBX-BOOTED on the serial
console) and to process exit. Runs wherever /dev/kvm can boot Linux; bench/boot
puts it inside the nested harness when the host needs that."""

import argparse
import statistics
import subprocess
import sys
import time

MARKER = b"SBX-BOOTED"


def boot_once(argv, timeout):
    """Returns (seconds to the marker, seconds to exit, the VMM's own boot-timer ms or None)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    marker_at = None
    timer_ms = None
    lines = []
    for line in proc.stdout:
        if marker_at is None and MARKER in line:
            marker_at = time.monotonic() - start
        if b"guest boot time:" in line and timer_ms is None:
            timer_ms = float(line.split(b"guest boot time:")[1].split()[0])
        lines.append(line)
        if time.monotonic() - start > timeout:
            proc.kill()
            break
    status = proc.wait()
    exit_at = time.monotonic() - start
    if status != 0 or marker_at is None:
        sys.stderr.write(b"".join(lines[-30:]).decode(errors="replace"))
        raise SystemExit(f"boot failed (status {status}): {' '.join(argv)}")
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
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()

    cmdline = ("console=ttyS0 reboot=k panic=1 pci=off nomodule i8042.noaux i8042.nomux "
               "i8042.nopnp i8042.dumbkbd quiet")
    ours = [args.vmm, "--kernel", args.kernel, "--initrd", args.initrd, "--cpus", str(args.cpus),
            "--memory", str(args.memory), "--cmdline", cmdline]
    # The closest QEMU machine to ours: microvm without ACPI, firmware option
    # ROMs or RTC, legacy PIC/PIT, one 16550 on ttyS0, and an i8042 so that
    # reboot=k ends the process (microvm has none by default and the
    # kernel's reboot fallbacks then take over a minute).
    qemu = [args.qemu, "-M", "microvm,x-option-roms=off,rtc=off,acpi=off,pit=on,pic=on",
            "-enable-kvm", "-cpu", "host", "-smp", str(args.cpus), "-m", str(args.memory),
            "-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio", "-device", "i8042",
            "-no-reboot",
            "-kernel", args.kernel, "-initrd", args.initrd, "-append", cmdline]

    results = {"sbx-vmm": [], "qemu": []}
    timers = []
    # Warm the page cache for both binaries and the images, then alternate.
    boot_once(ours, args.timeout)
    boot_once(qemu, args.timeout)
    for run in range(args.runs):
        for name, argv in (("sbx-vmm", ours), ("qemu", qemu)):
            marker, exit_at, timer = boot_once(argv, args.timeout)
            results[name].append((marker, exit_at))
            if timer is not None:
                timers.append(timer / 1000)
            print(f"run {run + 1}/{args.runs} {name:<8} init after {marker * 1000:8.1f} ms, "
                  f"exit after {exit_at * 1000:8.1f} ms", flush=True)

    print()
    print(f"kernel {args.kernel}")
    print(f"initrd {args.initrd}")
    print(f"{args.cpus} vCPU, {args.memory} MiB, {args.runs} runs each, alternating")
    for name in ("sbx-vmm", "qemu"):
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


if __name__ == "__main__":
    main()

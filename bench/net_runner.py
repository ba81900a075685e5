#!/usr/bin/env python3
"""bench/net's Python side.

  net_runner.py tap --vmm SBX_VMM --kernel K --initrd I --runs N --seconds S --out TSV
      in level 1: a tap of our own (172.31.0.1/24), and RUNS boots each of
      sbx-vmm and QEMU -M microvm (alternating who goes first) with the same
      kernel and initramfs (bench/net_guest.sh as /sbx-run) on it; per boot
      iperf3 host -> guest and guest -> host for S seconds (the client here,
      the server in the guest) and the guest's ping RTT; appends samples.
  net_runner.py iperf JSON         Mbit/s received (iperf3 -J's sum_received)
  net_runner.py wrk OUTPUT         "rps p50_ms p99_ms errors" from wrk --latency
  net_runner.py table TSV [NOTE]   the markdown tables of medians

Samples are TSV lines "KEY<TAB>VALUE" appended to one file; the table takes
the median of each key. Mbit/s = 10^6 bits/s, as iperf3 reports.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile

TAP, HOST_IP, GUEST_IP, MAC = "benchtap0", "172.31.0.1", "172.31.0.2", "52:54:00:12:34:56"


def append(out, key, value):
    with open(out, "a") as f:
        f.write(f"{key}\t{value}\n")
    print(f"BENCH-NET: {key} {value}", flush=True)


def iperf_mbps(text):
    import json
    d = json.loads(text)
    if "error" in d:
        raise RuntimeError(d["error"])
    return d["end"]["sum_received"]["bits_per_second"] / 1e6


# --- tap: both VMMs on a tap we made ----------------------------------------

def tap(argv):
    import argparse
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "guest"))
    import vmrun  # noqa: E402

    ap = argparse.ArgumentParser(prog="net_runner.py tap")
    ap.add_argument("--vmm", required=True, help="path of sbx-vmm")
    ap.add_argument("--qemu", default="qemu-system-x86_64")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--memory", type=int, default=256)
    ap.add_argument("--cpu", default="", help="taskset -c CPU for both VMMs ('' for none)")
    ap.add_argument("--client-cpu", default="", help="taskset -c CPU for the iperf3 client ('' for none)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    class Pinned(vmrun.Machine):
        def argv(self):
            base = super().argv()
            return (["taskset", "-c", args.cpu] + base) if args.cpu else base

    def client(vmm, reverse):
        cmd = (["taskset", "-c", args.client_cpu] if args.client_cpu else []) + [
            "iperf3", "-c", GUEST_IP, "-p", "5201", "-t", str(args.seconds), "-J",
            "--connect-timeout", "10000"] + (["-R"] if reverse else [])
        key = f"tap.{vmm}.{'g2h' if reverse else 'h2g'}"
        # One attempt: the guest's one-shot server is gone after it, and
        # the marker came only once the server listened.
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 120)
        try:
            append(args.out, key, f"{iperf_mbps(p.stdout):.2f}")
        except (ValueError, KeyError, RuntimeError) as e:
            vmrun.host("NET-IPERF", f"{vmm} {key}: {e} {p.stderr.strip()[:200]}")

    failed = {"sbx": 0, "qemu": 0}
    vmrun.make_tap(TAP, HOST_IP)
    try:
        for run in range(args.runs):
            for vmm in (("sbx", "qemu") if run % 2 == 0 else ("qemu", "sbx")):
                vmrun.host("BENCH-RUN", f"tap {run + 1}/{args.runs} {vmm}")
                workdir = tempfile.mkdtemp(prefix="sbx-bench-net.", dir="/tmp")
                m = Pinned(vmm, args.kernel, args.initrd, sbx_vmm=args.vmm, qemu=args.qemu,
                           cpus=1, memory=args.memory, net=(TAP, MAC),
                           control=os.path.join(workdir, "control.sock") if vmm == "sbx" else None)
                m.on("SBX-NET-IPERF-READY:", lambda n, vmm=vmm: client(vmm, n.strip() == "2"))
                m.start()
                status = m.wait(args.seconds * 4 + 600, silence=args.seconds * 2 + 240)
                m.join_handlers(timeout=args.seconds + 150)
                for line in m.output:
                    r = re.search(r"SBX-NET-PING: round-trip min/avg/max = [0-9.]+/([0-9.]+)/", line)
                    if r:
                        append(args.out, f"tap.{vmm}.ping", r.group(1))
                if status != 0 or "SBX-RUN-EXIT: 0" not in m.output:
                    failed[vmm] += 1
                    vmrun.host("BENCH-FAILED", f"tap {vmm}: status {status}")
                subprocess.run(["rm", "-rf", workdir])
    finally:
        vmrun.delete_tap(TAP)
    append(args.out, "tap.failed", f"sbx={failed['sbx']},qemu={failed['qemu']}")
    return 0 if not any(failed.values()) else 1


# --- wrk ---------------------------------------------------------------------

def wrk_ms(text):
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1, "s": 1e3, "m": 6e4}[m.group(2)]


def wrk(path):
    text = open(path).read()
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", text).group(1))
    p50 = wrk_ms(re.search(r"^\s+50%\s+(\S+)", text, re.M).group(1))
    p99 = wrk_ms(re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1))
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors += int(bad.group(1)) if bad else 0
    print(f"{rps:.1f} {p50:.2f} {p99:.2f} {errors}")
    return 0


# --- table -------------------------------------------------------------------

def table(path, note=""):
    samples = {}
    for line in open(path):
        key, _, value = line.rstrip("\n").partition("\t")
        samples.setdefault(key, []).append(value)

    def med(key):
        try:
            values = [float(v) for v in samples.get(key, [])]
        except ValueError:
            return None
        return statistics.median(values) if values else None

    def n(key):
        return len(samples.get(key, []))

    def fmt(v, digits=1):
        return f"{v:.{digits}f}" if v is not None else "n/a"

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "n/a"

    if note:
        print(note)
        print()
    if any(k.startswith("sbxd.") for k in samples):
        sbxd_table(samples, med, n, fmt, ratio)
    if any(k.startswith("tap.") for k in samples):
        tap_table(samples, med, n, fmt, ratio)
    if any(k.startswith("hosted.") for k in samples):
        hosted_table(med, n, fmt, ratio)
    return 0


def sbxd_table(samples, med, n, fmt, ratio):
    print("Sandbox network through sbxd (the sandbox: slim image, 1 vCPU, 1024 MiB; "
          "iperf3 3.12 and the probe in its guest; the internet: a namespace in level 1)")
    print()
    print("| median | unit | sandbox ↔ internet (NAT) | level 1 ↔ sandbox (its tap, no NAT) "
          "| level 1 ↔ internet (no VM) | NAT / tap |")
    print("|---|---|---|---|---|---|")
    for label, nat, direct, l1 in (
            ("TCP, the sandbox sends", "sbxd.nat.up", "sbxd.tap.up", "sbxd.l1.up"),
            ("TCP, the sandbox receives", "sbxd.nat.down", "sbxd.tap.down", "sbxd.l1.down")):
        print(f"| {label} ({n(nat)} runs) | Mbit/s | {fmt(med(nat))} | {fmt(med(direct))} | "
              f"{fmt(med(l1))} | {ratio(med(nat), med(direct))} |")
    for stat in ("median", "p95"):
        nat, direct, l1 = (f"sbxd.connect.{w}.{stat}" for w in ("nat", "tap", "l1"))
        print(f"| TCP connect, {stat} of each run's connects ({n(nat)} runs) | ms | {fmt(med(nat), 2)} | "
              f"{fmt(med(direct), 2)} | {fmt(med(l1), 2)} | {ratio(med(nat), med(direct))} |")
    print()


def tap_table(samples, med, n, fmt, ratio):
    print("virtio-net on a tap, both VMMs started directly on a tap bench/net made (not through sbxd): "
          "same kernel and initramfs, 1 vCPU, iperf3 server in the guest, client in level 1")
    print()
    print("| median | unit | sbx-vmm | QEMU microvm | sbx / QEMU |")
    print("|---|---|---|---|---|")
    for label, unit, key, digits in (("TCP host → guest", "Mbit/s", "h2g", 1),
                                     ("TCP guest → host", "Mbit/s", "g2h", 1),
                                     ("ping guest → host, average RTT", "ms", "ping", 2)):
        s, q = med(f"tap.sbx.{key}"), med(f"tap.qemu.{key}")
        print(f"| {label} ({n(f'tap.sbx.{key}')}/{n(f'tap.qemu.{key}')} runs) | {unit} | "
              f"{fmt(s, digits)} | {fmt(q, digits)} | {ratio(s, q)} |")
    if samples.get("tap.failed"):
        print(f"\nboots with a failed step: {samples['tap.failed'][-1]}")
    print()


def hosted_table(med, n, fmt, ratio):
    print("Hosted URL (the guest's app: bench/net_probe.py http, GET /, 21 bytes) with wrk in level 1")
    print()
    print("| median | unit | through sbxd's HTTPS proxy | direct to the guest (HTTP) | proxy / direct |")
    print("|---|---|---|---|---|")
    for label, unit, key, digits in (("requests/s", "req/s", "rps", 1), ("latency p50", "ms", "p50", 2),
                                     ("latency p99", "ms", "p99", 2), ("errors (timeouts, non-2xx)", "", "errors", 0)):
        p, d = med(f"hosted.proxy.{key}"), med(f"hosted.direct.{key}")
        print(f"| {label} ({n(f'hosted.proxy.{key}')} runs) | {unit} | {fmt(p, digits)} | {fmt(d, digits)} | "
              f"{ratio(p, d) if key != 'errors' else ''} |")
    w, r = med("hosted.wake"), med("hosted.running")
    print()
    print("| median | unit | paused (idle-stopped) sandbox | running sandbox | paused / running |")
    print("|---|---|---|---|---|")
    print(f"| request through the proxy → answer ({n('hosted.wake')}/{n('hosted.running')} runs) | s | "
          f"{fmt(w, 2)} | {fmt(r, 3)} | {ratio(w, r)} |")
    print()


def main(argv):
    if argv and argv[0] == "tap":
        return tap(argv[1:])
    if len(argv) == 2 and argv[0] == "iperf":
        print(f"{iperf_mbps(open(argv[1]).read()):.2f}")
        return 0
    if len(argv) == 2 and argv[0] == "wrk":
        return wrk(argv[1])
    if len(argv) in (2, 3) and argv[0] == "table":
        return table(argv[1], argv[2] if len(argv) == 3 else "")
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

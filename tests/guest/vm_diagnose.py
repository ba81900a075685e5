#!/usr/bin/env python3
"""Where a guest is stuck: asks sbx-vmm's control socket for "diagnose"
twice, a second apart, and prints each vCPU's position (as a kernel symbol
when a System.map is given), its interrupt state and local APIC, the
IOAPIC pins in use, the UART, and the rate of KVM's counters between the
two samples (an interrupt storm, a vCPU that never exits, one that only
halts). Used by guest tests when a guest stops answering.

Usage: vm_diagnose.py CONTROL_SOCKET [SYSTEM_MAP]
"""
import bisect
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmm_control  # noqa: E402

# A stuck VMM must not make the diagnosis hang too.
socket.setdefaulttimeout(30)


class Symbols:
    """Addresses to name+offset from a System.map (text symbols only)."""

    def __init__(self, path):
        self.addrs, self.names = [], []
        if not path:
            return
        rows = []
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[1] in "tTwW":
                    rows.append((int(parts[0], 16), parts[2]))
        rows.sort()
        self.addrs = [a for a, _ in rows]
        self.names = [n for _, n in rows]

    def name(self, addr):
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0 or addr - self.addrs[i] > 0x100000:
            return "?"
        return f"{self.names[i]}+{addr - self.addrs[i]:#x}"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sock = sys.argv[1]
    syms = Symbols(sys.argv[2] if len(sys.argv) > 2 else None)
    first = vmm_control.request(sock, {"op": "diagnose"})
    t0 = time.monotonic()
    time.sleep(1)
    second = vmm_control.request(sock, {"op": "diagnose"})
    dt = time.monotonic() - t0
    for d in (first, second):
        if not d.get("ok"):
            print(f"DIAG: diagnose failed: {d}")
            return 1
    print(f"DIAG: VM {second['state']}, kvmclock {second['kvmclock_ns'] / 1e9:.3f} s")
    if "vcpus_unavailable" in second:
        print(f"DIAG: no vCPU registers: {second['vcpus_unavailable']}")
    for a, b in zip(first["vcpus"], second["vcpus"]):
        rates = []
        for name, value in sorted(b["kvm"].items()):
            delta = value - a["kvm"].get(name, value)
            if delta:
                rates.append(f"{name} {delta / dt:.0f}/s")
        if "rip" not in b:  # did not stop: counters only
            print(f"DIAG: vCPU {b['id']}: did not stop; KVM counters: {', '.join(rates) or 'none moved'}")
            continue
        lapic = b["lapic"]
        print(f"DIAG: vCPU {b['id']}: rip {b['rip']} {syms.name(int(b['rip'], 16))} (a second earlier "
              f"{a['rip']} {syms.name(int(a['rip'], 16))}), cpl {b['cpl']}, {b['mp_state']}, "
              f"IF={int(b['interrupts_enabled'])} shadow={int(b['interrupt_shadow'])} "
              f"injecting {b['injected_vector']} exception {b['exception']} nmi {b['nmi']}")
        print(f"DIAG:   lapic isr {lapic['isr']} irr {lapic['irr']} tpr {lapic['tpr']} "
              f"timer lvt {lapic['lvt_timer']} initial {lapic['timer_initial']} current "
              f"{lapic['timer_current']} tsc_deadline {lapic['tsc_deadline']}")
        print(f"DIAG:   KVM counters: {', '.join(rates) or 'none moved'}")
    for p in second["ioapic"]:
        print(f"DIAG: ioapic pin {p['pin']}: vector {p['vector']} {'masked' if p['masked'] else 'unmasked'} "
              f"{'level' if p['level'] else 'edge'} remote_irr={int(p['remote_irr'])} "
              f"asserted={int(p['asserted'])} dest {p['dest']}")
    print(f"DIAG: pic {second['pic']}, pit {second['pit']}")
    print(f"DIAG: serial {second['serial']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Tells a guest that spins on page faults level 1's KVM injects — the
nested harness's "translation from below" failure (tests/harness/README.md,
"Page-fault spins") — from a guest that is stuck on its own.

Six `diagnose` samples half a second apart. A vCPU spins from below when,
between the first and the last, nearly every exit was an instruction KVM
emulated and then answered with a #PF (`insn_emulation` and `pf_guest` grow
together), and a sample caught it at a kernel rip with that #PF pending. Each of those exits was
the guest's CPU executing the instruction at rip, so the guest's
translation of rip works; KVM's own walk of the same page tables (through
the VMM's memory) fails. sbx-vmm's `rip_walk` says what the guest's memory
holds: mapped (KVM's walk is wrong) or not (the guest's CPU uses a
translation its memory lost). Either way the fault is not the guest's or
the VMM's: a line `HARNESS-BELOW: ...` says so, for run_nested.

Usage: pf_spin.py CONTROL_SOCKET NAME
Exit status 0 when some vCPU spins from below, 1 when none does.
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import vmm_control  # noqa: E402

socket.setdefaulttimeout(20)
KERNEL_HALF = 0xFFFF800000000000


def spin(samples, index):
    """(rip, #PFs, seconds, walk) when vCPU `index` spins from below over
    `samples` (diagnose replies with their times)."""
    vcpus = [(t, r["vcpus"][index]) for t, r in samples if index < len(r.get("vcpus", []))]
    if len(vcpus) < 2:
        return None
    (t0, first), (t1, last) = vcpus[0], vcpus[-1]
    d = {n: last.get("kvm", {}).get(n, 0) - first.get("kvm", {}).get(n, 0)
         for n in ("exits", "insn_emulation", "pf_guest")}
    if d["pf_guest"] < 10 or d["pf_guest"] < 0.8 * d["insn_emulation"] or d["exits"] < d["pf_guest"]:
        return None
    # The sample taken while a #PF was pending has the instruction's rip
    # (the others may be in the guest's #PF handler).
    for _, v in vcpus:
        walk = v.get("rip_walk")
        if v.get("exception") == 14 and int(v.get("rip", "0"), 16) >= KERNEL_HALF and walk and "error" not in walk:
            return v["rip"], d["pf_guest"], t1 - t0, walk
    return None


def main():
    sock, name = sys.argv[1], sys.argv[2]
    samples = []
    try:
        for i in range(6):
            if i:
                time.sleep(0.5)
            samples.append((time.monotonic(), vmm_control.request(sock, {"op": "diagnose"})))
    except (OSError, ValueError):
        pass
    found = False
    for index in range(max((len(r.get("vcpus", [])) for _, r in samples), default=0)):
        hit = spin(samples, index)
        if not hit:
            continue
        rip, count, seconds, walk = hit
        if walk.get("maps"):
            memory = (f"maps it (physical {walk['physical']}, "
                      f"{'executable' if walk.get('executable') else 'NOT executable'}): KVM's walk is wrong")
        else:
            memory = (f"does not map it (entries {' '.join(walk.get('entries', []))}): "
                      "the guest's CPU uses a translation its memory lost")
        print(f"HARNESS-BELOW: {name} vCPU {index} spins at rip {rip} on #PFs level 1's KVM injects "
              f"while emulating ({count} in {seconds:.1f} s); the guest's memory {memory}")
        found = True
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())

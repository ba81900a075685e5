#!/usr/bin/env python3
"""Level 1's keeper VM: one VM with an in-kernel irqchip and one vCPU that
never runs, held open for level 1's lifetime (tests/harness/init starts it
while level 1 has a single CPU online).

KVM flips static keys when the first VM starts and the last one ends
(preempt_notifier_key, kvm_create_vm's preempt_notifier_inc) and when a
vCPU's local APIC leaves its software-disabled reset state
(apic_sw_disabled); each flip patches kernel text through text_poke_bp's
int3 protocol while the other CPU runs. Under multi-threaded TCG that
patching wedges level 1 with every CPU in asm_exc_int3 at the patched site
(finish_task_switch's preempt notifiers), and a CPU that misses the
patched-in notifier keeps another CPU's per-CPU host save area
(tests/harness/README.md, "Level 1 itself"). Holding one VM and one
never-enabled LAPIC keeps both counts above zero, so the keys are patched
once, here, and never again.

Prints "ready" on stdout once the VM exists, then sleeps until killed.
KVM ioctl numbers: Documentation/virt/kvm/api.rst (_IO(KVMIO=0xAE, n)).
"""
import fcntl
import os
import signal
import sys

KVM_CREATE_VM = 0xAE01
KVM_CREATE_VCPU = 0xAE41
KVM_CREATE_IRQCHIP = 0xAE60


def main() -> int:
    try:
        kvm = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
        vm = fcntl.ioctl(kvm, KVM_CREATE_VM, 0)
        fcntl.ioctl(vm, KVM_CREATE_IRQCHIP, 0)
        fcntl.ioctl(vm, KVM_CREATE_VCPU, 0)
    except OSError as e:
        print(f"kvm_keeper: {e}", file=sys.stderr)
        return 1
    print("ready", flush=True)
    os.close(1)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())

// The ioctl requests a running VM's threads issue, for whoever confines
// them (sbx-vmm's seccomp filters, host-tools/sbx-vmm/seccomp_policy.cpp),
// without including <linux/kvm.h> above this layer. Numbers from
// include/uapi/linux/kvm.h.
#pragma once

#include <cstdint>

namespace sbx::kvm::ioctls {

// _IOC_TYPE of every KVM ioctl (KVMIO): the request's bits 8..15.
inline constexpr std::uint64_t kTypeMask = 0xff00;
std::uint64_t kvm_type();  // KVMIO << 8

std::uint64_t run();       // KVM_RUN: a vCPU thread
std::uint64_t irq_line();  // KVM_IRQ_LINE: a device raising or lowering its line

}  // namespace sbx::kvm::ioctls

// The x86 CPU model a guest sees: CPUID filtered from what KVM supports,
// and the MSR values a vCPU starts with. Pure functions, unit-tested.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "vmm/kvm/kvm.hpp"

namespace sbx::kvm {

struct CpuTopology {
    std::uint32_t vcpu_id = 0;     // equals the initial (x2)APIC id
    std::uint32_t vcpu_count = 1;  // one socket, one thread per core
    bool tsc_deadline = false;     // KVM_CAP_TSC_DEADLINE_TIMER
};

// Adjusts KVM_GET_SUPPORTED_CPUID output for one vCPU: APIC ids and core
// counts (leaves 0x1, 0x4, 0xB, 0x1F, 0x80000008, 0x8000001E), the
// hypervisor bit, and no architectural PMU (leaf 0xA), which we do not model.
[[nodiscard]] std::vector<CpuidEntry> guest_cpuid(std::vector<CpuidEntry> supported,
                                                  const CpuTopology& topology);

// MSRs set on every vCPU before its first entry (Linux expects a sane
// SYSCALL state, fast strings, and MTRRs enabled with write-back default).
[[nodiscard]] std::vector<std::pair<std::uint32_t, std::uint64_t>> boot_msrs();

}  // namespace sbx::kvm

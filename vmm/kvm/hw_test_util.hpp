// For the tests that run against this host's /dev/kvm: a vCPU set up as the
// VM builder leaves it at a 64-bit kernel entry (CPUID, boot MSRs plus any
// extra ones, LAPIC LINT pins, long-mode registers at kTestEntry).
#pragma once

#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "vmm/kvm/kvm.hpp"
#include "vmm/kvm/x86_cpu.hpp"
#include "vmm/kvm/x86_gdt.hpp"

namespace sbx::kvm::testing {

inline LongModeEntry test_entry() {
    LongModeEntry entry;
    entry.rip = 0x1000200;
    entry.rsi = 0x7000;
    entry.rsp = 0x8ff0;
    entry.cr3 = 0x9000;
    entry.gdt_base = 0x500;
    entry.gdt_limit = static_cast<std::uint16_t>(sizeof(x86::kBootGdt) - 1);
    return entry;
}

inline void boot_vcpu(const System& sys, const Vcpu& vcpu,
                      const std::vector<std::pair<std::uint32_t, std::uint64_t>>& extra_msrs = {}) {
    auto supported = sys.supported_cpuid();
    REQUIRE(supported);
    REQUIRE(vcpu.set_cpuid(guest_cpuid(*supported, {0, 1, sys.has_tsc_deadline_timer()})));
    auto msrs = boot_msrs();
    msrs.insert(msrs.end(), extra_msrs.begin(), extra_msrs.end());
    REQUIRE(vcpu.set_msrs(msrs));
    REQUIRE(vcpu.setup_lapic_lints());
    REQUIRE(vcpu.setup_long_mode(test_entry()));
}

}  // namespace sbx::kvm::testing

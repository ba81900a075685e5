// CPUID entries as KVM reports and accepts them, and the checks a snapshot
// needs: can this host give a restored guest the CPU features it was using,
// and a short fingerprint of the CPU for the snapshot header. Pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/result.hpp"

namespace sbx::kvm {

// One CPUID leaf/subleaf as KVM reports and accepts it (struct kvm_cpuid_entry2).
struct CpuidEntry {
    std::uint32_t function = 0;
    std::uint32_t index = 0;
    std::uint32_t flags = 0;  // KVM_CPUID_FLAG_*
    std::uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;

    // KVM_CPUID_FLAG_SIGNIFCANT_INDEX: `index` selects a subleaf.
    static constexpr std::uint32_t kSignificantIndex = 1;

    friend bool operator==(const CpuidEntry&, const CpuidEntry&) = default;
};

// Refuses a guest CPUID (saved in a snapshot) that asks for features the
// host's KVM cannot provide. For the feature leaves (1 ecx/edx, 7.0
// ebx/ecx/edx, 7.1 eax, 0xd.0 eax/edx and 0xd.1 eax/ecx/edx, 0x80000001
// ecx/edx, 0x80000008 ebx) every bit set in `saved` must be set in
// `host_supported` (KVM_GET_SUPPORTED_CPUID), except the bits the VMM or KVM
// set at run time rather than report as supported (hypervisor, TSC deadline,
// HTT, OSXSAVE, APIC, OSPKE). The vendor strings (leaf 0) must match. The
// error's code is "cpu_mismatch"; its message names leaf, register and bits.
[[nodiscard]] Result<void> check_cpuid_compatible(std::span<const CpuidEntry> saved,
                                                  std::span<const CpuidEntry> host_supported);

// Vendor, family, model and stepping from leaves 0 and 1 (Intel SDM Vol. 2A
// CPUID, "Processor Version Information"), plus a stable 64-bit hash (FNV-1a)
// of the feature leaves that check_cpuid_compatible compares.
struct CpuSummary {
    std::string vendor;
    std::uint32_t family = 0, model = 0, stepping = 0;
    std::uint64_t feature_hash = 0;
};
[[nodiscard]] CpuSummary summarize_cpuid(std::span<const CpuidEntry> cpuid);

}  // namespace sbx::kvm

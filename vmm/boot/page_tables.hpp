// The paging structures and descriptor tables the vCPU starts with
// (boot.rst "64-bit Boot Protocol": 64-bit mode with paging enabled, the
// kernel, zero page and command line identity-mapped, a GDT with flat
// 64-bit code and data segments).
#pragma once

#include <cstdint>

#include "base/result.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/kvm/x86_gdt.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot {

// Page-table entry bits (Intel SDM Vol. 3A 4.5, "4-Level Paging").
inline constexpr std::uint64_t kPtePresent = 1ULL << 0;
inline constexpr std::uint64_t kPteWritable = 1ULL << 1;
inline constexpr std::uint64_t kPtePageSize = 1ULL << 7;  // in a PDE: maps a 2 MiB page
inline constexpr std::uint64_t kLargePageSize = 2 * kMiB;
inline constexpr std::uint64_t kEntriesPerTable = kPageSize / sizeof(std::uint64_t);
static_assert(kEntriesPerTable * kLargePageSize == kIdentityMapSize);

// GDTR/IDTR limits: size in bytes minus one.
inline constexpr std::uint16_t kGdtLimit =
    static_cast<std::uint16_t>(x86::kBootGdt.size() * sizeof(std::uint64_t) - 1);
inline constexpr std::uint16_t kIdtLimit = static_cast<std::uint16_t>(kIdtSize - 1);

// PML4[0] -> PDPT, PDPT[0] -> PD, PD[i] -> i * 2 MiB: an identity map of
// [0, 1 GiB). The rest of each table page is zeroed.
[[nodiscard]] Result<void> write_boot_page_tables(const GuestMemory& mem);

// x86::kBootGdt at kGdtAddr and a zeroed IDT at kIdtAddr.
[[nodiscard]] Result<void> write_boot_gdt(const GuestMemory& mem);

}  // namespace sbx::boot

// The BIOS-style e820 memory map handed to the kernel in boot_params
// (bootparam.h struct boot_e820_entry; arch/x86/include/asm/e820/types.h).
#pragma once

#include <cstdint>
#include <vector>

#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot {

// enum e820_type.
inline constexpr std::uint32_t kE820Ram = 1;
inline constexpr std::uint32_t kE820Reserved = 2;

struct E820Entry {
    std::uint64_t addr = 0;
    std::uint64_t size = 0;
    std::uint32_t type = 0;

    bool operator==(const E820Entry&) const = default;
};

// RAM entries for guest memory, leaving out the EBDA and the legacy
// VGA/BIOS hole [0x9fc00, 1 MiB): with the standard layout that is
// [0, 0x9fc00), [1 MiB, end of low RAM) and, when present, [4 GiB, end).
[[nodiscard]] std::vector<E820Entry> build_e820(const GuestMemory& mem);

}  // namespace sbx::boot

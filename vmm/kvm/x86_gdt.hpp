// The flat 64-bit GDT the VMM hands to the guest at boot. The 64-bit boot
// protocol (Documentation/arch/x86/boot.rst) asks for a 64-bit code segment
// and flat 4 GiB data segments with base 0; it names the selectors
// __BOOT_CS (0x10) and __BOOT_DS (0x18), but startup_64 loads its own GDT
// before any segment reload, so like Firecracker we use 0x08 and 0x10. The
// TSS entry is only the low half of a 16-byte long-mode descriptor: the CPU
// uses the hidden state loaded through KVM_SET_SREGS, never this table.
// Shared by the boot layer (which writes it into guest memory) and the KVM
// layer (which loads the matching hidden segment state into the vCPU).
#pragma once

#include <array>
#include <cstdint>

namespace sbx::x86 {

// Packs a segment descriptor (Intel SDM Vol. 3A 3.4.5): flags holds the
// access byte in bits 0-7 and the G/DB/L/AVL nibble in bits 12-15.
constexpr std::uint64_t gdt_entry(std::uint16_t flags, std::uint32_t base, std::uint32_t limit) {
    return ((static_cast<std::uint64_t>(base) & 0xff000000ULL) << (56 - 24)) |
           ((static_cast<std::uint64_t>(flags) & 0x0000f0ffULL) << 40) |
           ((static_cast<std::uint64_t>(limit) & 0x000f0000ULL) << (48 - 16)) |
           ((static_cast<std::uint64_t>(base) & 0x00ffffffULL) << 16) |
           (static_cast<std::uint64_t>(limit) & 0x0000ffffULL);
}

// Index 0 null, 1 code (64-bit, present, DPL 0), 2 data, 3 TSS.
inline constexpr std::array<std::uint64_t, 4> kBootGdt = {
    gdt_entry(0, 0, 0),
    gdt_entry(0xa09b, 0, 0xfffff),
    gdt_entry(0xc093, 0, 0xfffff),
    gdt_entry(0x808b, 0, 0xfffff),
};
inline constexpr std::uint16_t kBootCodeSelector = 1 * 8;
inline constexpr std::uint16_t kBootDataSelector = 2 * 8;
inline constexpr std::uint16_t kBootTssSelector = 3 * 8;

// Control register and EFER bits used for the 64-bit entry state.
inline constexpr std::uint64_t kCr0Pe = 1ULL << 0;
inline constexpr std::uint64_t kCr0Et = 1ULL << 4;
inline constexpr std::uint64_t kCr0Pg = 1ULL << 31;
inline constexpr std::uint64_t kCr4Pae = 1ULL << 5;
inline constexpr std::uint64_t kEferLme = 1ULL << 8;
inline constexpr std::uint64_t kEferLma = 1ULL << 10;

}  // namespace sbx::x86

// The guest physical address map of a Sandboxer microVM: where the boot
// structures, the kernel, RAM and the MMIO devices live.
//
// Low memory (below 1 MiB) holds the structures the VMM writes before the
// first instruction runs; the kernel is loaded at 1 MiB; RAM stops at 3 GiB
// and resumes at 4 GiB so that [3 GiB, 4 GiB) is free for MMIO (virtio-mmio
// devices, the IOAPIC and the local APICs).
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot {

inline constexpr std::uint64_t kPageSize = 0x1000;
inline constexpr std::uint64_t kMiB = 1ULL << 20;
inline constexpr std::uint64_t kGiB = 1ULL << 30;

// --- Low memory: boot structures (all below the EBDA at 0x9fc00) ---------

// GDT loaded by the vCPU setup: x86::kBootGdt (4 descriptors, 32 bytes).
inline constexpr GuestAddress kGdtAddr{0x500};
// IDT: a single zeroed 8-byte entry. Interrupts stay disabled until the
// kernel installs its own IDT (boot.rst "64-bit Boot Protocol").
inline constexpr GuestAddress kIdtAddr{0x520};
inline constexpr std::uint64_t kIdtSize = 8;
// struct boot_params, the "zero page" (bootparam.h); %rsi points here at
// entry. One 4 KiB page.
inline constexpr GuestAddress kZeroPageAddr{0x7000};
inline constexpr std::uint64_t kZeroPageSize = 0x1000;
// Initial %rsp. The stack grows down through [0x8000, 0x8ff0), the page
// after the zero page; 16-byte aligned as the SysV ABI expects.
inline constexpr GuestAddress kBootStackPointer{0x8ff0};
// 4-level paging structures identity-mapping [0, 1 GiB) with 2 MiB pages:
// PML4[0] -> PDPT, PDPT[0] -> PD, PD[0..511] -> 2 MiB frames. One page each.
inline constexpr GuestAddress kPml4Addr{0x9000};
inline constexpr GuestAddress kPdptAddr{0xa000};
inline constexpr GuestAddress kPdAddr{0xb000};
inline constexpr std::uint64_t kIdentityMapSize = 1 * kGiB;
// The kernel command line (NUL-terminated), pointed to by hdr.cmd_line_ptr.
inline constexpr GuestAddress kCmdlineAddr{0x20000};
// Space reserved for the command line, including its terminating NUL.
inline constexpr std::uint64_t kCmdlineMaxSize = 0x10000;
// The Extended BIOS Data Area: the last KiB of conventional memory
// [0x9fc00, 0xa0000). MP spec 1.4 section 4 lists "the last kilobyte of
// system base memory" as a place the OS searches for the MP floating pointer;
// the MP configuration table follows it directly.
inline constexpr GuestAddress kEbdaAddr{0x9fc00};
inline constexpr GuestAddress kMpTableAddr = kEbdaAddr;
// End of conventional memory; [0xa0000, 1 MiB) is the legacy VGA/BIOS hole.
inline constexpr std::uint64_t kLowMemoryEnd = 0xa0000;

// --- The kernel --------------------------------------------------------------

// HIMEM: where a bzImage's protected-mode code is loaded (boot.rst "Loading
// The Rest of The Kernel": 0x100000 for bzImage kernels). ELF segments must
// also lie at or above it so they cannot clobber the boot structures.
inline constexpr GuestAddress kKernelLoadAddr{0x100000};
inline constexpr std::uint64_t kHimemStart = kKernelLoadAddr.value;

// --- RAM and the 32-bit MMIO gap --------------------------------------------

// [3 GiB, 4 GiB) is never RAM; guest RAM beyond 3 GiB is placed at 4 GiB.
inline constexpr std::uint64_t kMmioGapStart = 0xc0000000;
inline constexpr std::uint64_t kMmioGapEnd = 0x100000000;
inline constexpr std::uint64_t kHighRamStart = kMmioGapEnd;
// The smallest guest accepted. Whether a given kernel fits is checked
// separately by load_kernel: a bzImage decompresses at pref_address (16 MiB
// on x86-64) and needs init_size bytes from there (about 18 MiB for the
// project's kernel, over 50 MiB for a Debian distribution kernel).
inline constexpr std::uint64_t kMinGuestMemory = 64 * kMiB;
// x86-64 physical addresses are architecturally at most 52 bits wide.
inline constexpr std::uint64_t kMaxPhysicalAddress = 1ULL << 52;

// --- MMIO devices inside the gap ------------------------------------------

// IOAPIC register window (the default base of the 82093AA and of KVM's
// in-kernel IOAPIC); also the address the MP table advertises.
inline constexpr std::uint64_t kIoapicAddr = 0xfec00000;
// Local APIC register window (the architectural default IA32_APIC_BASE).
inline constexpr std::uint64_t kLapicAddr = 0xfee00000;
// A one-byte MMIO register the guest writes to mark the end of boot, so the
// VMM can time boot.
inline constexpr std::uint64_t kBootTimerAddr = 0xd0000000;
// virtio-mmio transports: device i occupies one page at
// kVirtioMmioBase + i * kVirtioMmioStride and raises GSI kVirtioMmioFirstIrq + i.
inline constexpr std::uint64_t kVirtioMmioBase = 0xd0001000;
inline constexpr std::uint64_t kVirtioMmioStride = 0x1000;
inline constexpr std::uint32_t kVirtioMmioFirstIrq = 5;
// The IOAPIC has 24 pins (0..23) and every pin is listed in the MP table, so
// IRQs 5..23 are available for virtio-mmio devices.
inline constexpr std::uint32_t kIoapicPins = 24;
inline constexpr std::uint32_t kVirtioMmioMaxDevices = kIoapicPins - kVirtioMmioFirstIrq;

[[nodiscard]] constexpr GuestAddress virtio_mmio_addr(std::uint32_t index) {
    return GuestAddress(kVirtioMmioBase + index * kVirtioMmioStride);
}
[[nodiscard]] constexpr std::uint32_t virtio_mmio_irq(std::uint32_t index) {
    return kVirtioMmioFirstIrq + index;
}

// The layout must not overlap itself.
static_assert(kGdtAddr.value + 4 * 8 <= kIdtAddr.value);
static_assert(kIdtAddr.value + kIdtSize <= kZeroPageAddr.value);
static_assert(kZeroPageAddr.value + kZeroPageSize < kBootStackPointer.value);
static_assert(kBootStackPointer.value < kPml4Addr.value);
static_assert(kPml4Addr.value + kPageSize == kPdptAddr.value);
static_assert(kPdptAddr.value + kPageSize == kPdAddr.value);
static_assert(kPdAddr.value + kPageSize <= kCmdlineAddr.value);
static_assert(kCmdlineAddr.value + kCmdlineMaxSize <= kEbdaAddr.value);
static_assert(kBootTimerAddr >= kMmioGapStart && kBootTimerAddr < kVirtioMmioBase);
static_assert(kVirtioMmioBase + kVirtioMmioMaxDevices * kVirtioMmioStride <= kIoapicAddr);
static_assert(kIoapicAddr < kLapicAddr && kLapicAddr < kMmioGapEnd);

// Checks a requested guest memory size: at least kMinGuestMemory, a whole
// number of pages, and small enough that RAM relocated above 4 GiB stays
// below the 52-bit physical address limit.
[[nodiscard]] Result<void> check_memory_size(std::uint64_t mem_bytes);

// The RAM regions for mem_bytes of guest memory: [0, min(mem, 3 GiB)) and,
// when mem_bytes exceeds 3 GiB, [4 GiB, 4 GiB + (mem - 3 GiB)). Expects a
// size that passed check_memory_size (a partial trailing page is dropped).
[[nodiscard]] std::vector<MemoryRegionSpec> ram_regions(std::uint64_t mem_bytes);

}  // namespace sbx::boot

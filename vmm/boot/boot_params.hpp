// struct boot_params, the "zero page" (arch/x86/include/uapi/asm/bootparam.h,
// Documentation/arch/x86/zero-page.rst), written at layout::kZeroPageAddr
// and passed to the kernel in %rsi.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "base/result.hpp"
#include "vmm/boot/e820.hpp"
#include "vmm/boot/initrd.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/boot/setup_header.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot {

namespace zero_page {

// struct boot_e820_entry.
struct [[gnu::packed]] E820Entry {
    std::uint64_t addr;
    std::uint64_t size;
    std::uint32_t type;
};
static_assert(sizeof(E820Entry) == 20);

// E820_MAX_ENTRIES_ZEROPAGE.
inline constexpr std::size_t kE820MaxEntries = 128;

// struct boot_params, with the members this loader never writes folded into
// padding. Offsets in the comments are bootparam.h's.
struct [[gnu::packed]] BootParams {
    std::uint8_t unused_0x000[0x0c0];        // screen_info .. olpc_ofw_header
    std::uint32_t ext_ramdisk_image;         // 0x0c0
    std::uint32_t ext_ramdisk_size;          // 0x0c4
    std::uint32_t ext_cmd_line_ptr;          // 0x0c8
    std::uint8_t unused_0x0cc[0x1e8 - 0x0cc];  // _pad4 .. scratch
    std::uint8_t e820_entries;               // 0x1e8
    std::uint8_t unused_0x1e9[0x1f1 - 0x1e9];  // eddbuf_entries .. sentinel, _pad6
    setup_header::Layout hdr;                // 0x1f1
    std::uint8_t pad7[setup_header::kMaxEnd - setup_header::kStart - sizeof(setup_header::Layout)];
    std::uint32_t edd_mbr_sig_buffer[16];    // 0x290
    E820Entry e820_table[kE820MaxEntries];   // 0x2d0
    std::uint8_t unused_0xcd0[0x1000 - 0xcd0];  // _pad8, eddbuf, _pad9
};
static_assert(sizeof(BootParams) == kZeroPageSize);
static_assert(offsetof(BootParams, ext_ramdisk_image) == 0x0c0);
static_assert(offsetof(BootParams, ext_ramdisk_size) == 0x0c4);
static_assert(offsetof(BootParams, ext_cmd_line_ptr) == 0x0c8);
static_assert(offsetof(BootParams, e820_entries) == 0x1e8);
static_assert(offsetof(BootParams, hdr) == setup_header::kStart);
static_assert(offsetof(BootParams, edd_mbr_sig_buffer) == 0x290);
static_assert(offsetof(BootParams, e820_table) == 0x2d0);

inline constexpr std::size_t kExtRamdiskImage = offsetof(BootParams, ext_ramdisk_image);
inline constexpr std::size_t kExtRamdiskSize = offsetof(BootParams, ext_ramdisk_size);
inline constexpr std::size_t kExtCmdLinePtr = offsetof(BootParams, ext_cmd_line_ptr);
inline constexpr std::size_t kE820EntriesOffset = offsetof(BootParams, e820_entries);
inline constexpr std::size_t kE820TableOffset = offsetof(BootParams, e820_table);

// heap_end_ptr: end of the real-mode setup heap, from the start of the
// real-mode code, minus 0x200 (boot.rst "heap_end_ptr").
inline constexpr std::uint16_t kHeapEndPtr = 0xfe00;
// What an ELF vmlinux gets in place of a kernel-provided setup header.
// kernel_alignment: 16 MiB, the x86-64 LOAD_PHYSICAL_ADDR alignment.
inline constexpr std::uint32_t kElfKernelAlignment = 0x1000000;

}  // namespace zero_page

struct BootParamsInput {
    // The bzImage's raw setup header (LoadedKernel::setup_header), copied to
    // hdr. Empty for an ELF vmlinux: a minimal header is synthesized.
    std::span<const std::uint8_t> setup_header;
    GuestAddress cmdline_addr = kCmdlineAddr;
    // hdr.cmdline_size: the longest command line, without NUL, the kernel
    // may expect at cmdline_addr.
    std::uint32_t cmdline_size = 0;
    std::optional<InitrdPlacement> initrd;
    std::span<const E820Entry> e820;
};

// Writes a fresh zero page at kZeroPageAddr: everything zero except the
// setup header and the loader-owned fields (type_of_loader 0xff, loadflags
// CAN_USE_HEAP, heap_end_ptr, cmd_line_ptr/ext_cmd_line_ptr, cmdline_size,
// ramdisk_image/size and their ext_ halves, the e820 table).
[[nodiscard]] Result<void> write_boot_params(const GuestMemory& mem, const BootParamsInput& input);

}  // namespace sbx::boot

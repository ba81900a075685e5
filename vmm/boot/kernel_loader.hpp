// Loads a Linux kernel image into guest memory for the 64-bit boot protocol
// (Documentation/arch/x86/boot.rst): either a bzImage or an uncompressed ELF64
// vmlinux. Every size and offset in the image is checked; a malformed image
// yields an error, never an out-of-bounds access.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot {

struct LoadedKernel {
    enum Kind { BzImage, Elf };

    Kind kind = BzImage;
    // Where the vCPU starts: startup_64 (load address + 0x200) for a bzImage,
    // e_entry for an ELF vmlinux.
    GuestAddress entry;
    // The highest loaded byte + 1.
    GuestAddress end;
    // The end of all memory the kernel uses before it reads the e820 map:
    // for a bzImage the larger of `end` and its decompression window
    // [runtime_start, runtime_start + init_size) (boot.rst "init_size"); for
    // an ELF vmlinux, `end`. The initrd is placed above it.
    GuestAddress reserved_end;
    // bzImage: the raw setup header, file bytes [0x1f1, 0x202 + byte[0x201]),
    // to copy into boot_params.hdr. Empty for ELF.
    std::vector<std::uint8_t> setup_header;
    // bzImage header fields (0 for ELF, which has no header).
    std::uint32_t init_size = 0;
    std::uint16_t protocol_version = 0;
    // hdr.cmdline_size: longest command line without its NUL (0 for ELF).
    std::uint32_t cmdline_size = 0;
    // hdr.initrd_addr_max: highest address an initrd byte may occupy
    // (0x37ffffff for ELF, the protocol's default when the field is absent).
    std::uint32_t initrd_addr_max = 0;
    // ELF: the bytes read from the image's file (image_fd) rather than
    // copied from its mapping.
    std::uint64_t read_bytes = 0;
};

// Detects the image format (ELF magic, else "HdrS" at 0x202) and loads it:
// a bzImage's protected-mode part at 0x100000, an ELF's PT_LOAD segments at
// their p_paddr (which must be at or above 1 MiB) with bss zeroed.
// `image_fd`, when not -1, is the file `image` maps from offset 0: an ELF's
// segments are then read from it into guest memory with pread(2), not
// copied from the mapping. The guest sees the same bytes either way.
[[nodiscard]] Result<LoadedKernel> load_kernel(const GuestMemory& mem, std::span<const std::uint8_t> image,
                                               int image_fd = -1);

}  // namespace sbx::boot

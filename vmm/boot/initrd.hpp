// Places the initial ramdisk in guest memory (boot.rst "ramdisk_image",
// "initrd_addr_max").
#pragma once

#include <cstdint>
#include <span>

#include "base/result.hpp"
#include "vmm/boot/kernel_loader.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot {

struct InitrdPlacement {
    GuestAddress addr;
    std::uint64_t size = 0;
};

// Copies the initrd to the highest page-aligned address at which it fits in
// one RAM region, entirely below min(the 32-bit MMIO gap, initrd_addr_max + 1)
// and entirely above kernel.reserved_end. initrd_addr_max is the address of
// the highest byte the initrd may occupy (hdr.initrd_addr_max, or
// LoadedKernel::initrd_addr_max). An empty initrd is an error.
[[nodiscard]] Result<InitrdPlacement> load_initrd(const GuestMemory& mem,
                                                  std::span<const std::uint8_t> data,
                                                  const LoadedKernel& kernel,
                                                  std::uint64_t initrd_addr_max);

}  // namespace sbx::boot

#include "vmm/boot/layout.hpp"

namespace sbx::boot {

Result<void> check_memory_size(std::uint64_t mem_bytes) {
    if (mem_bytes < kMinGuestMemory) {
        return make_error("guest memory of {} MiB is below the {} MiB minimum", mem_bytes / kMiB,
                          kMinGuestMemory / kMiB);
    }
    if (mem_bytes % kPageSize != 0) {
        return make_error("guest memory size {:#x} is not a multiple of the {} KiB page size",
                          mem_bytes, kPageSize / 1024);
    }
    // RAM above the gap ends at mem_bytes + (gap size); keep it addressable.
    if (mem_bytes > kMaxPhysicalAddress - (kMmioGapEnd - kMmioGapStart)) {
        return make_error("guest memory of {} MiB exceeds the 52-bit physical address space",
                          mem_bytes / kMiB);
    }
    return ok();
}

std::vector<MemoryRegionSpec> ram_regions(std::uint64_t mem_bytes) {
    const std::uint64_t pages = mem_bytes - mem_bytes % kPageSize;
    std::vector<MemoryRegionSpec> regions;
    if (pages == 0) {
        return regions;
    }
    const std::uint64_t low = pages < kMmioGapStart ? pages : kMmioGapStart;
    regions.push_back(MemoryRegionSpec{GuestAddress(0), low});
    if (pages > low) {
        regions.push_back(MemoryRegionSpec{GuestAddress(kHighRamStart), pages - low});
    }
    return regions;
}

}  // namespace sbx::boot

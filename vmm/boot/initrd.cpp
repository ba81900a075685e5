#include "vmm/boot/initrd.hpp"

#include <algorithm>

#include "vmm/boot/layout.hpp"

namespace sbx::boot {

Result<InitrdPlacement> load_initrd(const GuestMemory& mem, std::span<const std::uint8_t> data,
                                    const LoadedKernel& kernel, std::uint64_t initrd_addr_max) {
    if (data.empty()) {
        return make_error("initrd is empty");
    }
    const std::uint64_t size = data.size();
    // Exclusive upper bound; initrd_addr_max names the last usable byte.
    const std::uint64_t limit =
        initrd_addr_max >= kMmioGapStart ? kMmioGapStart : initrd_addr_max + 1;
    // Lowest usable address: the first page boundary at or above the kernel.
    std::uint64_t floor_addr = kernel.reserved_end.value;
    if (floor_addr > UINT64_MAX - kPageSize) {
        return make_error("kernel end {:#x} leaves no room for an initrd", floor_addr);
    }
    floor_addr = (floor_addr + kPageSize - 1) & ~(kPageSize - 1);

    // Try regions from the top down; the first fit is the highest address.
    const auto& regions = mem.regions();
    for (auto it = regions.rbegin(); it != regions.rend(); ++it) {
        const std::uint64_t top = std::min(it->end(), limit);
        const std::uint64_t bottom = std::max(it->start.value, floor_addr);
        if (top <= bottom || top - bottom < size) {
            continue;
        }
        const std::uint64_t addr = (top - size) & ~(kPageSize - 1);
        if (addr < bottom) {
            continue;
        }
        if (auto r = mem.write(GuestAddress(addr), data); !r) {
            return r.error();
        }
        return InitrdPlacement{GuestAddress(addr), size};
    }
    return make_error("initrd ({} bytes) does not fit in guest memory ({} MiB)", size,
                      mem.total_size() / kMiB);
}

}  // namespace sbx::boot

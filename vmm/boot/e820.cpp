#include "vmm/boot/e820.hpp"

#include <algorithm>

#include "vmm/boot/layout.hpp"

namespace sbx::boot {

std::vector<E820Entry> build_e820(const GuestMemory& mem) {
    std::vector<E820Entry> entries;
    for (const auto& region : mem.regions()) {
        const std::uint64_t start = region.start.value;
        const std::uint64_t end = region.end();
        // The part below the EBDA is conventional memory.
        if (start < kEbdaAddr.value) {
            const std::uint64_t low_end = std::min(end, kEbdaAddr.value);
            entries.push_back(E820Entry{start, low_end - start, kE820Ram});
        }
        // The part from 1 MiB up (the hole in between is not RAM to the guest).
        if (end > kHimemStart) {
            const std::uint64_t high_start = std::max(start, kHimemStart);
            entries.push_back(E820Entry{high_start, end - high_start, kE820Ram});
        }
    }
    return entries;
}

}  // namespace sbx::boot

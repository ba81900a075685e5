// A guest virtual address translated in software through the guest's own
// page tables, as they are in its memory: for a diagnosis ("does the
// guest's memory map the rip its CPU faults on?"), never on a hot path.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx {

struct PageWalk {
    // Each entry read, from the top level down (5 or 4 entries at most);
    // the last is the leaf or the first entry without P.
    std::vector<std::uint64_t> entries;
    bool present = false;            // every level's P bit was set
    std::uint64_t physical = 0;      // the translation, when present
    std::uint64_t page_size = 0;     // 4 KiB, 2 MiB or 1 GiB, when present
    bool writable = false;           // R/W at every level
    bool user = false;               // U/S at every level
    bool executable = false;         // no level with XD (NX)
};

// 4-level or, with `la57` (CR4.LA57), 5-level long-mode paging from
// `cr3` (Intel SDM vol. 3A §4.5; AMD APM vol. 2 §5.3). A table outside
// guest memory is an error; a missing P bit is a walk with present false.
[[nodiscard]] Result<PageWalk> walk_long_mode(const GuestMemory& memory, std::uint64_t cr3, bool la57,
                                              std::uint64_t vaddr);

}  // namespace sbx

// A copy-on-write restore maps the snapshot's memory file MAP_PRIVATE.
// Where the file has a hole (memory that was zero when saved), the guest's
// first touch makes the file system fill it: on tmpfs that is a page of
// RAM added to the file for every page touched (and, on a write, a private
// copy besides: twice the memory), and SIGBUS once the tmpfs is full. On a
// disk file system a hole reads as the zero page. Anonymous memory mapped
// over each hole reads the same zeros and costs a page only once written,
// wherever the file lives. A save of such memory stays right: a page never
// written is read from the file (a hole, zeros), a written one from memory
// (snapshot/format/private_pages.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/result.hpp"

namespace sbx::snapshot {

struct HoleOverlayLimits {
    std::size_t min_bytes = 64 * 1024;  // smaller holes stay mapped from the file
    std::size_t max_ranges = 4096;      // each splits the mapping: bounded, well under vm.max_map_count
};

// Maps anonymous memory over every hole of fd in [offset, offset + size)
// that lies before the file's end, at the same place in the mapping that
// starts at `base` (page-aligned, mapping fd from `offset`). What lies past
// the file's end is left alone: reading it is a SIGBUS that says the file
// shrank (mapping_guard.hpp). Returns how many holes were overlaid.
[[nodiscard]] Result<std::size_t> overlay_holes(std::uint8_t* base, std::size_t size, int fd, std::uint64_t offset,
                                                HoleOverlayLimits limits = {});

}  // namespace sbx::snapshot

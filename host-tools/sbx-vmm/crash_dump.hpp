// A guest's memory written out when it dies of a triple fault, so its page
// tables can be walked afterwards (tests/guest/tools/walk_dump.py): a
// sparse raw file whose offset N is guest physical address N, with only the
// non-zero pages written. Asked for with SBX_VMM_CRASH_DUMP_DIR, a
// diagnosis aid for test runs; the file is DIR/sbx-vmm-PID.mem. DIR is
// opened at start, so a jailed VMM writes there too (when DIR lets its
// uid create files: tests make it 1777).
#pragma once

#include <string>

#include "base/result.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx {

// Writes `memory` to `name` in the directory `dir_fd` (created 0600,
// never over an existing file); returns the bytes written.
[[nodiscard]] Result<std::uint64_t> write_crash_dump(const GuestMemory& memory, int dir_fd, const std::string& name);

}  // namespace sbx

// A guest's memory written out when it dies of a triple fault, so its page
// tables can be walked afterwards (tests/guest/tools/walk_dump.py): a
// sparse raw file whose offset N is guest physical address N, with only the
// non-zero pages written. Asked for with SBX_VMM_CRASH_DUMP_DIR, a
// diagnosis aid for test runs; the file is DIR/sbx-vmm-PID.mem.
#pragma once

#include <string>

#include "base/result.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx {

// Writes `memory` to `path` (created 0600, never over an existing file);
// returns the bytes written.
[[nodiscard]] Result<std::uint64_t> write_crash_dump(const GuestMemory& memory, const std::string& path);

}  // namespace sbx

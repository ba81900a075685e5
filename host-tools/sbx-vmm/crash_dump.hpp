// A guest's memory written out when it dies of a triple fault, so its page
// tables can be walked afterwards (tests/guest/tools/walk_dump.py): a
// sparse raw file whose offset N is guest physical address N, with only the
// non-zero pages written. Asked for with SBX_VMM_CRASH_DUMP_DIR, a
// diagnosis aid for test runs; the file is DIR/sbx-vmm-PID.mem. DIR is
// opened at start, so a jailed VMM writes there too (when DIR lets its
// uid create files: tests make it 1777). It is written as NAME.partial and
// renamed when whole: a test that sees NAME can read it (a guest's memory
// takes a while to write, and its level 1 may be about to power off).
#pragma once

#include <string>

#include "base/result.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx {

inline constexpr const char* kCrashDumpPartialSuffix = ".partial";

// Writes `memory` to `name` + kCrashDumpPartialSuffix in the directory
// `dir_fd` (created 0600, never over an existing file), then renames it
// to `name`, also when writing failed part way; returns the bytes written.
[[nodiscard]] Result<std::uint64_t> write_crash_dump(const GuestMemory& memory, int dir_fd, const std::string& name);

}  // namespace sbx

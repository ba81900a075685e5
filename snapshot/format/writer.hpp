// Writing a snapshot file (docs/snapshot-format.md): memory chunks are
// checked for zeros, compressed (zstd) and checksummed (XXH3) on worker
// threads and written in order through io_uring; the file is written under
// a temporary name in the destination's directory, fsynced, renamed over
// the destination and the directory fsynced, so a crash or error leaves
// either the old file or the complete new one.
#pragma once

#include <string>

#include "base/result.hpp"
#include "snapshot/format/types.hpp"

namespace sbx::snapshot {

// A region with a `file` (MemoryRegionView) is a MAP_PRIVATE mapping of
// it: the pages the process wrote (pagemap) are read through the mapping,
// every other page from the file, and a chunk with no written page over a
// hole of the file is a zero range read from nowhere. So saving a VM
// restored copy-on-write faults in none of the pages it never touched.
// Errors: `invalid:` for bad contents or options (nothing is created),
// `io:` for system errors (the temporary file is removed), among them a
// mapped file that no longer holds its region.
Result<WriteStats> write_snapshot(const std::string& path, const SnapshotContents& contents,
                                  const WriteOptions& options = {});

}  // namespace sbx::snapshot

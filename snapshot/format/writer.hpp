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

// Errors: `invalid:` for bad contents or options (nothing is created),
// `io:` for system errors (the temporary file is removed).
Result<WriteStats> write_snapshot(const std::string& path, const SnapshotContents& contents,
                                  const WriteOptions& options = {});

}  // namespace sbx::snapshot

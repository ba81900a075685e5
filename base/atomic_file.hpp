// Replacing a file so that a reader, or the next start after a crash, sees
// either the old content or the new, never a part: written to a temporary
// name beside it, fsynced, renamed over it (rename(2) is atomic within a
// file system), then the directory fsynced so the rename itself is durable.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx {

// PATH gets DATA with exactly MODE (not reduced by the umask). The
// temporary file is PATH + ".tmp"; a stale one from a crash is replaced.
[[nodiscard]] Result<void> write_file_atomically(const std::string& path, std::string_view data, mode_t mode);

}  // namespace sbx

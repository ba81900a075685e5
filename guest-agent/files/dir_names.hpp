// The names in a directory, for the ops and the tar walker that list,
// archive or remove trees one directory at a time.
#pragma once

#include <string>
#include <vector>

#include "base/result.hpp"

namespace sbx::agent::files {

// The entries of the directory open at `dir_fd` ("." and ".." left out),
// sorted bytewise; at most `limit` + 1 of them, so a caller can tell a
// directory over its limit. The fd's position is used, not its ownership.
[[nodiscard]] Result<std::vector<std::string>> read_dir_names(int dir_fd, std::size_t limit);

}  // namespace sbx::agent::files

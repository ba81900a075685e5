// Archives a file tree as tar: the sending side of tar_get (in the guest)
// and of the client's put_tree (on the host). Never follows a symlink
// below the root; regular files, directories and symlinks are archived,
// anything else (devices, fifos, sockets) is counted as skipped.
#pragma once

#include <sys/stat.h>

#include "base/unique_fd.hpp"
#include "guest-agent/files/tar_writer.hpp"

namespace sbx::agent::files {

// What to archive: a directory (its contents, names relative to it) or a
// regular file (one entry named by its last path component). A symlink
// given as the root itself is followed.
struct TreeRoot {
    UniqueFd fd;
    struct stat st {};
    std::string name;  // the file's entry name (for a directory: unused)
};
[[nodiscard]] Result<TreeRoot> open_tree_root(const std::string& path);

struct TreeStats {
    std::uint64_t entries = 0;
    std::uint64_t skipped = 0;
};
// Streams the tree through `writer` (not finished: the caller does that).
// Directory entries are sorted by name, so the same tree gives the same archive.
[[nodiscard]] Result<TreeStats> write_tree(tar::TarWriter& writer, const TreeRoot& root);

}  // namespace sbx::agent::files

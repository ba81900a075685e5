// mkdir -p for the agent's ops (mkdir, file_write's mkdirs, tar_put's
// target): every directory it creates gets exactly `mode` (not filtered by
// the umask) and the requested owner, so a user's new file does not end up
// in directories only root may write.
#pragma once

#include "guest-agent/files/request_fields.hpp"

namespace sbx::agent::files {

// Creates `path` (absolute) and its missing parents; existing directories
// (or symlinks to them) are left alone; a non-directory in the way is
// ENOTDIR, or EEXIST when it is `path` itself.
[[nodiscard]] Result<void> make_dirs(const std::string& path, std::uint32_t mode, const Owner& owner);

}  // namespace sbx::agent::files

// Files served as they are from one directory on the host: the desktop
// viewer's noVNC client (Debian's novnc package, /usr/share/novnc). Only a
// regular file inside the directory is ever read: a path with a `.` or
// `..` segment, an empty one, a backslash or a NUL is refused before any
// lookup, and the lookup itself (openat2 with RESOLVE_BENEATH, Linux 5.6)
// refuses a symlink, `..` or absolute, that leads out of the directory,
// which a symlink inside it may still use.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd {

struct StaticFile {
    std::string content_type;
    std::string body;
};

// The largest file served (noVNC's largest, core/rfb.js, is about 100 KiB).
inline constexpr std::size_t kMaxStaticFileBytes = 8 * 1024 * 1024;

// The file at `path` (percent-decoded, from '/') under `root`. Code
// not_found for anything refused or missing, internal for a read that
// fails.
[[nodiscard]] Result<StaticFile> read_static_file(const std::string& root, std::string_view path);

// By the name's extension (the WHATWG MIME sniffing standard's names):
// text/html, text/javascript (RFC 9239; a module script needs it),
// text/css, application/json, image/png, image/svg+xml, ...;
// application/octet-stream for the rest.
[[nodiscard]] std::string_view content_type_for(std::string_view name);

}  // namespace sbx::sbxd

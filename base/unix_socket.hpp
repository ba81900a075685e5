// Unix stream sockets by path, as the VMM's vsock, the agent and its host
// client all use them: connect, and listen with the path checked first (a
// stale socket file from a dead process is replaced; a live listener or a
// non-socket file at the path is an error naming it). A listening socket's
// file is mode 0600 from the moment it appears at the path: only its own
// user (and root) may connect. Listening needs write access to the path's
// directory, where a private directory briefly holds the socket.
#pragma once

#include <string>

#include "base/unique_fd.hpp"

namespace sbx {

enum class Blocking { Yes, No };

// Who may connect to a listening socket: its mode and, when group >= 0,
// its group (a daemon's socket shared with a group: 0660 and that group).
// Both are set before the socket appears at its path.
struct SocketAccess {
    unsigned mode = 0600;
    int group = -1;
};

[[nodiscard]] Result<UniqueFd> connect_unix(const std::string& path, Blocking blocking = Blocking::Yes);
[[nodiscard]] Result<UniqueFd> listen_unix(const std::string& path, Blocking blocking = Blocking::Yes,
                                           int backlog = 128, SocketAccess access = {});

}  // namespace sbx

// Where sbx-agent takes connections from and how it reaches the host:
// AF_VSOCK in a guest (listen on port 52 of any CID, connect to CID 2),
// Unix sockets for host-side tests (base/unix_socket.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "base/unique_fd.hpp"
#include "base/unix_socket.hpp"

namespace sbx::agent {

[[nodiscard]] Result<UniqueFd> listen_vsock(std::uint32_t port);
[[nodiscard]] Result<UniqueFd> connect_vsock_host(std::uint32_t port);
// "<prefix>_<port>": the same naming as the VMM's hybrid vsock.
[[nodiscard]] Result<UniqueFd> connect_unix_host(const std::string& prefix, std::uint32_t port);

// Accepts one connection (blocking, restarting on EINTR).
[[nodiscard]] Result<UniqueFd> accept_connection(int listener);

}  // namespace sbx::agent

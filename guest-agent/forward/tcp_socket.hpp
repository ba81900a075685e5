// TCP addresses and sockets for port forwarding, on both sides of the
// agent protocol (docs/agent-protocol.md, "Port forwarding"). No name
// resolution: the agent is a static binary (no NSS), so a host is a
// numeric IPv4 or IPv6 address, or "localhost" (127.0.0.1).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/unique_fd.hpp"

namespace sbx::agent {

struct TcpAddress {
    sockaddr_storage storage{};
    socklen_t length = 0;
    std::string text;  // "127.0.0.1:80", "[::1]:80": for messages

    [[nodiscard]] int family() const { return storage.ss_family; }
    [[nodiscard]] const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// Errors (errno 0) name what is wrong with the host.
[[nodiscard]] Result<TcpAddress> parse_tcp_address(std::string_view host, std::uint16_t port);

// A blocking connected socket. Gives up after `timeout` (ETIMEDOUT), so an
// address that drops SYNs does not hold the caller for minutes.
[[nodiscard]] Result<UniqueFd> connect_tcp(const TcpAddress& address, std::chrono::milliseconds timeout);

// A listening socket (SO_REUSEADDR, so a forward can be restarted at once).
[[nodiscard]] Result<UniqueFd> listen_tcp(const TcpAddress& address, int backlog = 128);

// The port a socket is bound to (the one the kernel chose for port 0).
[[nodiscard]] Result<std::uint16_t> local_port(int socket);

}  // namespace sbx::agent

// The connection to sbxd that sbx's HTTP and WebSocket clients share:
// its Unix socket, or each address a TCP host name resolves to in turn.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>

#include "base/result.hpp"
#include "host-tools/sbx/http_client.hpp"

namespace sbx::cli {

// Connects SOCKET (closed or fresh) to ADDRESS. Error code "unreachable".
[[nodiscard]] Result<void> connect_to_host(boost::asio::generic::stream_protocol::socket& socket,
                                           boost::asio::io_context& io, const HostAddress& address);

}  // namespace sbx::cli

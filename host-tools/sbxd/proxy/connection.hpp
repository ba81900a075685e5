// One client connection of the Proxy, as a C++20 coroutine on the
// io_context: the TLS handshake, then HTTP/1.1 requests in turn (RFC 9112
// has no multiplexing), each authenticated, forwarded to its app over one
// upstream connection kept while requests keep to the same sandbox and
// port, bodies relayed a piece at a time both ways; a WebSocket upgrade
// (RFC 6455 §4) that the app accepts turns the connection into a splice
// of raw bytes. Backend calls run on the proxy's pool, never here.
#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "host-tools/sbxd/proxy/proxy_shared.hpp"

namespace sbx::sbxd::proxy::detail {

// Serves socket until the client or the proxy ends it; never throws for
// anything the client or the app sends.
boost::asio::awaitable<void> serve_client(std::shared_ptr<Proxy::Shared> shared,
                                          boost::asio::ip::tcp::socket socket);

}  // namespace sbx::sbxd::proxy::detail

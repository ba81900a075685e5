// What the Proxy and its connections share (proxy.cpp, connection.cpp):
// one per Proxy, alive while a connection's coroutine still runs.
#pragma once

#include <memory>
#include <unordered_set>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "host-tools/sbxd/proxy/proxy.hpp"

namespace sbx::sbxd::proxy {

namespace detail {
// A client connection that Proxy::close can drop.
class OpenConnection {
public:
    virtual void abort() = 0;

protected:
    ~OpenConnection() = default;
};
}  // namespace detail

struct Proxy::Shared {
    Shared(boost::asio::io_context& io_context, ProxyConfig proxy_config,
           std::shared_ptr<Backend> proxy_backend, boost::asio::ssl::context tls_context)
        : io(io_context),
          config(std::move(proxy_config)),
          backend(std::move(proxy_backend)),
          tls(std::move(tls_context)),
          pool(config.limits.backend_threads) {}

    boost::asio::io_context& io;
    const ProxyConfig config;
    const std::shared_ptr<Backend> backend;
    boost::asio::ssl::context tls;
    boost::asio::thread_pool pool;  // Backend calls
    // The rest on the io_context's thread only.
    std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> acceptors;
    std::unordered_set<detail::OpenConnection*> connections;
    std::uint16_t first_port = 0;
    bool closed = false;
};

}  // namespace sbx::sbxd::proxy

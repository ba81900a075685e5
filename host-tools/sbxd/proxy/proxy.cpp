#include "host-tools/sbxd/proxy/proxy.hpp"

#include <charconv>
#include <exception>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.hpp"
#include "host-tools/sbxd/proxy/connection.hpp"
#include "host-tools/sbxd/proxy/host_name.hpp"
#include "host-tools/sbxd/proxy/proxy_shared.hpp"
#include "host-tools/sbxd/proxy/tls_context.hpp"

namespace sbx::sbxd::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// A coroutine's end: an exception (memory, say) is logged, never rethrown
// out of io_context::run.
void log_exception(std::exception_ptr error) {
    if (!error) {
        return;
    }
    try {
        std::rethrow_exception(error);
    } catch (const std::exception& e) {
        log::warn("proxy: a connection ended with {}", e.what());
    } catch (...) {
        log::warn("proxy: a connection ended with an unknown exception");
    }
}

asio::awaitable<void> accept_loop(std::shared_ptr<Proxy::Shared> shared, tcp::acceptor& acceptor) {
    asio::steady_timer retry(acceptor.get_executor());
    while (!shared->closed) {
        auto [ec, socket] = co_await acceptor.async_accept(kTuple);
        if (shared->closed || ec == asio::error::operation_aborted) {
            break;
        }
        if (ec) {
            // EMFILE and the like: try again shortly instead of spinning.
            log::warn("proxy: accepting a connection: {}", ec.message());
            retry.expires_after(std::chrono::milliseconds(100));
            co_await retry.async_wait(kTuple);
            continue;
        }
        if (shared->connections.size() >= shared->config.limits.max_connections) {
            continue;  // the socket closes here
        }
        socket.set_option(tcp::no_delay(true), ec);
        asio::co_spawn(acceptor.get_executor(), detail::serve_client(shared, std::move(socket)),
                       log_exception);
    }
}

struct TcpAddress {
    std::string host;
    std::uint16_t port = 0;
};

Result<TcpAddress> parse_tcp_address(std::string_view spec) {
    std::string_view rest = spec;
    if (rest.substr(0, 4) == "tcp:") {
        rest.remove_prefix(4);
    }
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
        return make_coded_error("invalid_argument", "the proxy's address '{}' must be tcp:HOST:PORT", spec);
    }
    std::string_view host = rest.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    std::string_view port = rest.substr(colon + 1);
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value > 65535) {
        return make_coded_error("invalid_argument", "the proxy's address '{}': the port must be 0 to 65535",
                                spec);
    }
    return TcpAddress{std::string(host), static_cast<std::uint16_t>(value)};
}

}  // namespace

Result<Proxy> Proxy::start(asio::io_context& io, ProxyConfig config, std::shared_ptr<Backend> backend) {
    if (!backend) {
        return make_coded_error("invalid_argument", "the proxy needs a backend");
    }
    if (!is_valid_domain(config.domain)) {
        return make_coded_error("invalid_argument", "the proxy's domain '{}' is not a host name",
                                config.domain);
    }
    for (const auto& service : config.services) {
        // A word that is a label of the domain's syntax, and no port.
        if (!is_valid_domain(service) || service.find('.') != std::string::npos ||
            service.find_first_not_of("0123456789") == std::string::npos ||
            service.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string::npos) {
            return make_coded_error("invalid_argument", "the proxy's service word '{}' is not a lower-case label",
                                    service);
        }
    }
    const auto& limits = config.limits;
    if (limits.backend_threads == 0 || limits.max_connections == 0 || limits.max_header_bytes < 1024) {
        return make_coded_error(
            "invalid_argument",
            "the proxy needs a backend thread, a connection and 1 KiB of header at least");
    }
    auto tls = make_tls_context(config.cert_chain_pem, config.private_key_pem);
    if (!tls) {
        return tls.error();
    }
    return Proxy(std::make_shared<Shared>(io, std::move(config), std::move(backend), std::move(*tls)));
}

Proxy::Proxy(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
Proxy::Proxy(Proxy&&) noexcept = default;
Proxy& Proxy::operator=(Proxy&& other) noexcept {
    if (this != &other) {
        if (shared_) {
            close();
            shared_->pool.join();
        }
        shared_ = std::move(other.shared_);
    }
    return *this;
}

Proxy::~Proxy() {
    if (shared_) {
        close();
        shared_->pool.join();
    }
}

Result<std::string> Proxy::listen(std::string_view address) {
    auto parsed = parse_tcp_address(address);
    if (!parsed) {
        return parsed.error();
    }
    boost::system::error_code ec;
    auto ip = asio::ip::make_address(parsed->host, ec);
    if (ec) {
        return make_coded_error("invalid_argument", "the proxy's address '{}' is not a numeric IP address",
                                parsed->host);
    }
    auto acceptor = std::make_unique<tcp::acceptor>(shared_->io);
    tcp::endpoint endpoint(ip, parsed->port);
    if (acceptor->open(endpoint.protocol(), ec); ec) {
        return make_error("opening a TCP socket: {}", ec.message());
    }
    acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (acceptor->bind(endpoint, ec); ec) {
        return make_error("binding tcp:{}:{}: {}", parsed->host, parsed->port, ec.message());
    }
    if (acceptor->listen(asio::socket_base::max_listen_connections, ec); ec) {
        return make_error("listening on tcp:{}:{}: {}", parsed->host, parsed->port, ec.message());
    }
    auto bound = acceptor->local_endpoint(ec);
    if (shared_->first_port == 0) {
        shared_->first_port = bound.port();
    }
    asio::co_spawn(shared_->io, accept_loop(shared_, *acceptor), log_exception);
    shared_->acceptors.push_back(std::move(acceptor));
    std::string host =
        bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
    return fmt::format("tcp:{}:{}", host, bound.port());
}

void Proxy::close() {
    if (!shared_) {
        return;
    }
    shared_->closed = true;
    for (auto& acceptor : shared_->acceptors) {
        boost::system::error_code ignored;
        acceptor->close(ignored);
    }
    // abort() only closes sockets; the coroutines end (and leave the set) later.
    for (auto* connection : shared_->connections) {
        connection->abort();
    }
}

std::uint16_t Proxy::port() const {
    return shared_ ? shared_->first_port : 0;
}

}  // namespace sbx::sbxd::proxy

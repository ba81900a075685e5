#include "host-tools/sbxd/http/server.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include <charconv>

#include "base/log.hpp"
#include "host-tools/sbxd/http/session.hpp"

namespace sbx::sbxd::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using LocalProtocol = asio::local::stream_protocol;
using TcpProtocol = asio::ip::tcp;

using detail::Session;
using detail::SessionContext;

class Server::Listener {
public:
    virtual ~Listener() = default;
    virtual void close() = 0;
};

namespace {

template <typename Protocol>
class Acceptor : public Server::Listener, public std::enable_shared_from_this<Acceptor<Protocol>> {
public:
    Acceptor(asio::io_context& io, SessionContext context)
        : acceptor_(io), retry_(io), context_(std::move(context)) {}

    typename Protocol::acceptor& acceptor() { return acceptor_; }
    void remove_on_close(std::string path, ino_t inode) {
        unlink_path_ = std::move(path);
        inode_ = inode;
    }

    void accept() {
        acceptor_.async_accept(
            [self = this->shared_from_this()](beast::error_code ec, typename Protocol::socket socket) {
                if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) {
                    return;
                }
                if (ec) {
                    // EMFILE and the like: try again shortly instead of spinning.
                    log::warn("accepting a connection: {}", ec.message());
                    self->retry_.expires_after(std::chrono::milliseconds(100));
                    self->retry_.async_wait([self](beast::error_code wait_ec) {
                        if (!wait_ec) {
                            self->accept();
                        }
                    });
                    return;
                }
                std::make_shared<Session<Protocol>>(std::move(socket), self->context_)->start();
                self->accept();
            });
    }

    void close() override {
        beast::error_code ignored;
        acceptor_.close(ignored);
        retry_.cancel();
        // Only the socket file this listener made: another sbxd may have
        // taken the path since (listen_unix replaces only stale sockets).
        struct stat st {};
        if (!unlink_path_.empty() && ::lstat(unlink_path_.c_str(), &st) == 0 && st.st_ino == inode_) {
            ::unlink(unlink_path_.c_str());
        }
    }

private:
    typename Protocol::acceptor acceptor_;
    asio::steady_timer retry_;
    SessionContext context_;
    std::string unlink_path_;
    ino_t inode_ = 0;
};

}  // namespace

Result<ListenAddress> parse_listen_address(std::string_view spec) {
    ListenAddress address;
    if (spec.substr(0, 5) == "unix:") {
        address.transport = Transport::Unix;
        address.path = std::string(spec.substr(5));
        if (address.path.empty()) {
            return make_error("--listen unix: needs a path");
        }
        return address;
    }
    if (spec.substr(0, 4) == "tcp:") {
        std::string_view rest = spec.substr(4);
        auto colon = rest.rfind(':');
        if (colon == std::string_view::npos || colon == 0) {
            return make_error("--listen '{}' must be tcp:HOST:PORT", spec);
        }
        std::string_view host = rest.substr(0, colon);
        if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
            host = host.substr(1, host.size() - 2);
        }
        std::string_view port = rest.substr(colon + 1);
        unsigned value = 0;
        auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
        if (ec != std::errc() || end != port.data() + port.size() || value > 65535) {
            return make_error("--listen '{}': the port must be 0 to 65535", spec);
        }
        address.transport = Transport::Tcp;
        address.host = std::string(host);
        address.port = static_cast<std::uint16_t>(value);
        return address;
    }
    return make_error("--listen '{}' must be unix:PATH or tcp:HOST:PORT", spec);
}

Server::Server(asio::io_context& io, asio::thread_pool& workers, RequestHandler handler, ServerLimits limits,
               BodyPolicy streams_body)
    : io_(io),
      workers_(workers),
      handler_(std::make_shared<const RequestHandler>(std::move(handler))),
      streams_body_(streams_body ? std::make_shared<const BodyPolicy>(std::move(streams_body)) : nullptr),
      limits_(limits) {}

Server::~Server() {
    close();
    threads_.cancel_all();
}

Result<std::string> Server::listen(const ListenAddress& address, SocketAccess unix_access) {
    SessionContext context{workers_, threads_, handler_, streams_body_, limits_, address.transport};
    beast::error_code ec;
    if (address.transport != Transport::Tcp) {
        auto fd = listen_unix(address.path, Blocking::No, 128, unix_access);
        if (!fd) {
            return fd.error();
        }
        struct stat st {};
        if (::lstat(address.path.c_str(), &st) != 0) {
            return sys_error("socket {}", address.path);
        }
        auto listener = std::make_shared<Acceptor<LocalProtocol>>(io_, context);
        listener->acceptor().assign(LocalProtocol(), fd->release(), ec);
        if (ec) {
            return make_error("listening on {}: {}", address.path, ec.message());
        }
        listener->remove_on_close(address.path, st.st_ino);
        listener->accept();
        listeners_.push_back(listener);
        return "unix:" + address.path;
    }
    auto ip = asio::ip::make_address(address.host, ec);
    if (ec) {
        return make_error("--listen tcp: '{}' is not a numeric IP address", address.host);
    }
    auto listener = std::make_shared<Acceptor<TcpProtocol>>(io_, context);
    auto& acceptor = listener->acceptor();
    TcpProtocol::endpoint endpoint(ip, address.port);
    if (acceptor.open(endpoint.protocol(), ec); ec) {
        return make_error("opening a TCP socket: {}", ec.message());
    }
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (acceptor.bind(endpoint, ec); ec) {
        return make_error("binding tcp:{}:{}: {}", address.host, address.port, ec.message());
    }
    if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
        return make_error("listening on tcp:{}:{}: {}", address.host, address.port, ec.message());
    }
    auto bound = acceptor.local_endpoint(ec);
    listener->accept();
    listeners_.push_back(listener);
    std::string host =
        bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
    return fmt::format("tcp:{}:{}", host, bound.port());
}

void Server::serve(UniqueFd socket, RequestHandler handler) {
    SessionContext context{workers_, threads_, std::make_shared<const RequestHandler>(std::move(handler)), nullptr,
                           limits_, Transport::Proxied};
    auto fd = std::make_shared<UniqueFd>(std::move(socket));
    asio::post(io_, [this, fd, context = std::move(context)] {
        LocalProtocol::socket adopted(io_);
        beast::error_code ec;
        adopted.assign(LocalProtocol(), fd->get(), ec);
        if (ec) {
            log::warn("serving a handed-over connection: {}", ec.message());
            return;
        }
        fd->release();
        std::make_shared<Session<LocalProtocol>>(std::move(adopted), context)->start();
    });
}

void Server::close() {
    for (auto& listener : listeners_) {
        listener->close();
    }
    listeners_.clear();
}

}  // namespace sbx::sbxd::http

#include "host-tools/sbxd/http/server.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <charconv>
#include <exception>
#include <optional>

#include "base/log.hpp"
#include "host-tools/sbxd/crypto/random.hpp"

namespace sbx::sbxd::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using LocalProtocol = asio::local::stream_protocol;
using TcpProtocol = asio::ip::tcp;

namespace {

struct SessionContext {
    asio::thread_pool& workers;
    std::shared_ptr<const RequestHandler> handler;
    ServerLimits limits;
    Transport transport;
};

std::string new_request_id() {
    auto hex = random_hex(8);
    return "req_" + (hex ? *hex : std::string("0"));
}

bool is_http_error(const beast::error_code& ec) {
    return ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category();
}

// One connection: requests read in turn (HTTP/1.1 has no multiplexing),
// each handled on the worker pool, its response written back here.
template <typename Protocol>
class Session : public std::enable_shared_from_this<Session<Protocol>> {
public:
    using Stream = beast::basic_stream<Protocol, asio::any_io_executor, beast::unlimited_rate_policy>;

    Session(typename Protocol::socket socket, SessionContext context)
        : stream_(std::move(socket)), context_(std::move(context)) {}

    void start() { read_header(); }

private:
    void read_header() {
        parser_.emplace();
        parser_->header_limit(static_cast<std::uint32_t>(context_.limits.max_header_bytes));
        parser_->body_limit(context_.limits.max_body_bytes);
        stream_.expires_after(buffer_.size() > 0 ? context_.limits.read_timeout
                                                 : context_.limits.idle_timeout);
        bhttp::async_read_header(
            stream_, buffer_, *parser_,
            [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
    }

    void on_header(beast::error_code ec) {
        if (ec) {
            return fail_read(ec);
        }
        if (auto length = parser_->content_length(); length && *length > context_.limits.max_body_bytes) {
            return reply_and_close(api::code::kPayloadTooLarge,
                                   fmt::format("the body is {} bytes; the limit is {}", *length,
                                               context_.limits.max_body_bytes));
        }
        version_ = parser_->get().version();
        if (beast::iequals(parser_->get()[bhttp::field::expect], "100-continue")) {
            // RFC 9110 §10.1.1: the client waits for this before the body.
            auto interim =
                std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
            stream_.expires_after(context_.limits.write_timeout);
            bhttp::async_write(
                stream_, *interim,
                [self = this->shared_from_this(), interim](beast::error_code wec, std::size_t) {
                    if (wec) {
                        return self->close();
                    }
                    self->read_body();
                });
            return;
        }
        read_body();
    }

    void read_body() {
        stream_.expires_after(context_.limits.read_timeout);
        bhttp::async_read(stream_, buffer_, *parser_,
                          [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) {
                                  return self->fail_read(ec);
                              }
                              self->dispatch();
                          });
    }

    void fail_read(beast::error_code ec) {
        if (ec == bhttp::error::body_limit) {
            return reply_and_close(
                api::code::kPayloadTooLarge,
                fmt::format("the body is over the limit of {} bytes", context_.limits.max_body_bytes));
        }
        if (ec == bhttp::error::header_limit) {
            return reply_and_close(
                api::code::kHeadersTooLarge,
                fmt::format("the headers are over the limit of {} bytes", context_.limits.max_header_bytes));
        }
        if (is_http_error(ec) && ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
            return reply_and_close(api::code::kBadRequest,
                                   fmt::format("malformed HTTP request: {}", ec.message()));
        }
        close();  // the peer went away, or a timeout
    }

    void dispatch() {
        auto message = parser_->release();
        keep_alive_ = message.keep_alive();
        Request request;
        request.request_id = new_request_id();
        request.transport = context_.transport;
        request.method = std::string(message.method_string());
        auto target = split_target(message.target());
        if (!target) {
            return write(Response::error(target.error(), request.request_id), request.request_id);
        }
        request.path = std::move(target->first);
        request.query = std::move(target->second);
        for (const auto& field : message) {
            request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
        }
        request.body = std::move(message.body());
        stream_.expires_never();
        asio::post(context_.workers, [self = this->shared_from_this(),
                                      request = std::move(request)]() mutable {
            std::string id = request.request_id;
            Response response = self->handle(std::move(request));
            asio::post(self->stream_.get_executor(), [self, response = std::move(response), id]() mutable {
                self->write(std::move(response), id);
            });
        });
    }

    // On a worker thread. A handler that throws (allocation failure, a bug)
    // costs its request a 500, never the daemon.
    Response handle(Request request) {
        std::string id = request.request_id;
        try {
            return (*context_.handler)(std::move(request));
        } catch (const std::exception& e) {
            log::error("request {}: {}", id, e.what());
            return Response::error(make_coded_error(api::code::kInternal, "internal error: {}", e.what()),
                                   id);
        }
    }

    void reply_and_close(std::string_view code, std::string message) {
        keep_alive_ = false;
        std::string id = new_request_id();
        write(Response::error(
                  api::ApiError{api::status_for_code(code), std::string(code), std::move(message)}, id),
              id);
    }

    void write(Response response, const std::string& request_id) {
        auto reply = std::make_shared<bhttp::response<bhttp::string_body>>(
            static_cast<bhttp::status>(response.status), version_ == 0 ? 11 : version_);
        reply->set(bhttp::field::server, "sbxd");
        reply->set(bhttp::field::content_type, "application/json");
        reply->set("X-Request-Id", request_id);
        for (const auto& [name, value] : response.headers) {
            reply->set(name, value);
        }
        reply->body() = std::move(response.body);
        reply->keep_alive(keep_alive_);
        reply->prepare_payload();
        stream_.expires_after(context_.limits.write_timeout);
        bhttp::async_write(stream_, *reply,
                           [self = this->shared_from_this(), reply](beast::error_code ec, std::size_t) {
                               if (ec) {
                                   return self->close();
                               }
                               if (!reply->keep_alive()) {
                                   return self->linger();
                               }
                               self->read_header();
                           });
    }

    // A close with unread input makes the kernel reset the connection, and
    // a reset can destroy the response before the client reads it (RFC 9112
    // §9.6): so stop sending, read and drop what the client still sends for
    // a moment, then close.
    void linger() {
        beast::error_code ignored;
        stream_.socket().shutdown(Protocol::socket::shutdown_send, ignored);
        stream_.expires_after(std::chrono::seconds(2));
        discard(0);
    }

    void discard(std::size_t total) {
        constexpr std::size_t kMaxDiscard = 4 * 1024 * 1024;
        buffer_.clear();
        stream_.async_read_some(buffer_.prepare(64 * 1024), [self = this->shared_from_this(), total](
                                                                beast::error_code ec, std::size_t n) {
            if (ec || total + n > kMaxDiscard) {
                return self->stream_.close();
            }
            self->discard(total + n);
        });
    }

    void close() {
        beast::error_code ignored;
        stream_.socket().shutdown(Protocol::socket::shutdown_send, ignored);
        stream_.close();
    }

    Stream stream_;
    SessionContext context_;
    beast::flat_buffer buffer_;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
    unsigned version_ = 11;
    bool keep_alive_ = true;
};

}  // namespace

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

Server::Server(asio::io_context& io, asio::thread_pool& workers, RequestHandler handler, ServerLimits limits)
    : io_(io),
      workers_(workers),
      handler_(std::make_shared<const RequestHandler>(std::move(handler))),
      limits_(limits) {}

Server::~Server() {
    close();
}

Result<std::string> Server::listen(const ListenAddress& address, SocketAccess unix_access) {
    SessionContext context{workers_, handler_, limits_, address.transport};
    beast::error_code ec;
    if (address.transport == Transport::Unix) {
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

void Server::close() {
    for (auto& listener : listeners_) {
        listener->close();
    }
    listeners_.clear();
}

}  // namespace sbx::sbxd::http

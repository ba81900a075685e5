#include "host-tools/sbxd/proxy/connection.hpp"

#include <sys/socket.h>

#include <array>
#include <chrono>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "host-tools/sbxd/proxy/auth.hpp"
#include "host-tools/sbxd/proxy/body_relay.hpp"
#include "host-tools/sbxd/proxy/error_page.hpp"
#include "host-tools/sbxd/proxy/forwarding.hpp"
#include "host-tools/sbxd/proxy/host_name.hpp"

namespace sbx::sbxd::proxy::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::awaitable;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kMaxInterimResponses = 8;  // 1xx before a final response (RFC 9110 §15.2)

using ClientStream = beast::ssl_stream<beast::tcp_stream>;
using UpstreamProtocol = asio::generic::stream_protocol;
using UpstreamStream =
    beast::basic_stream<UpstreamProtocol, asio::any_io_executor, beast::unlimited_rate_policy>;
using RequestParser = bhttp::request_parser<bhttp::buffer_body>;
using ResponseParser = bhttp::response_parser<bhttp::buffer_body>;

// Runs fn() on the pool and resumes the caller on its own executor with
// the result; fn may block. fn is taken by reference and copied into the
// pool's job: a callable passed by value into a co_await expression is
// destroyed twice by GCC 12 (GCC bug 101367), so callers keep theirs in
// a named local.
template <typename T, typename Fn>
awaitable<T> on_pool(asio::thread_pool& pool, const Fn& fn) {
    auto initiate = [&pool, &fn](auto handler) {
        asio::post(pool, [handler = std::move(handler), work = fn]() mutable {
            T result = work();
            auto executor = asio::get_associated_executor(handler);
            asio::post(executor, [handler = std::move(handler), result = std::move(result)]() mutable {
                std::move(handler)(std::move(result));
            });
        });
    };
    co_return co_await asio::async_initiate<decltype(asio::use_awaitable), void(T)>(initiate,
                                                                                    asio::use_awaitable);
}

// The status a Backend error stands for (proxy.hpp).
unsigned status_of_connect_error(const Error& error) {
    if (error.code == "connect_failed" || error.code == "agent_unavailable") {
        return 502;
    }
    if (error.code == "conflict") {
        return 409;
    }
    if (error.code == "not_found") {
        return 404;
    }
    return 503;
}

std::string_view explanation_of(unsigned status, bool from_connect) {
    switch (status) {
        case 400:
            return "The request is not valid HTTP/1.1.";
        case 401:
            return "This port is private: open the link with its token, or send the token as a bearer.";
        case 404:
            return from_connect ? "This sandbox is gone." : "No sandbox port has this address.";
        case 409:
            return "The sandbox is busy changing state; try again in a moment.";
        case 431:
            return "The request's header is too large.";
        case 502:
            return from_connect ? "Nothing listens on this port in the sandbox yet."
                                : "The app in the sandbox sent a response that is not valid HTTP.";
        case 504:
            return "The app in the sandbox did not answer in time.";
        default:
            return "The sandbox cannot be reached now.";
    }
}

struct UpstreamLink {
    UpstreamStream stream;
    beast::flat_buffer buffer;
    std::string sandbox_id;
    std::uint16_t port = 0;
    std::string service;
    unsigned served = 0;  // requests answered on it
    std::shared_ptr<void> hold{};  // Upstream::hold, released with the link
};

// The stream for a connected socket from Backend::connect.
Result<std::unique_ptr<UpstreamLink>> adopt_upstream(const asio::any_io_executor& executor, Upstream upstream,
                                                     const Target& target) {
    int domain = 0;
    socklen_t size = sizeof domain;
    if (::getsockopt(upstream.fd.get(), SOL_SOCKET, SO_DOMAIN, &domain, &size) != 0) {
        return sys_error("the upstream socket");
    }
    UpstreamProtocol protocol(domain, domain == AF_UNIX ? 0 : IPPROTO_TCP);
    UpstreamProtocol::socket socket(executor);
    beast::error_code ec;
    socket.assign(protocol, upstream.fd.get(), ec);
    if (ec) {
        return make_error("adopting the upstream socket: {}", ec.message());
    }
    upstream.fd.release();
    auto link = std::make_unique<UpstreamLink>(
        UpstreamLink{UpstreamStream(std::move(socket)), {}, target.sandbox_id, target.port, target.service, 0,
                     std::move(upstream.hold)});
    if (!upstream.received.empty()) {
        auto space = link->buffer.prepare(upstream.received.size());
        asio::buffer_copy(space, asio::buffer(upstream.received));
        link->buffer.commit(upstream.received.size());
    }
    return link;
}

class ClientConnection final : public OpenConnection {
public:
    ClientConnection(std::shared_ptr<Proxy::Shared> shared, tcp::socket socket)
        : shared_(std::move(shared)),
          limits_(shared_->config.limits),
          client_(std::move(socket), shared_->tls),
          keep_timer_(client_.get_executor()) {
        beast::error_code ec;
        auto peer = beast::get_lowest_layer(client_).socket().remote_endpoint(ec);
        auto address = peer.address();
        if (address.is_v6() && address.to_v6().is_v4_mapped()) {
            address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
        }
        client_ip_ = ec ? std::string("unknown") : address.to_string();
        shared_->connections.insert(this);
    }
    ~ClientConnection() { shared_->connections.erase(this); }
    ClientConnection(const ClientConnection&) = delete;
    ClientConnection& operator=(const ClientConnection&) = delete;

    void abort() override {
        beast::get_lowest_layer(client_).close();
        if (upstream_) {
            upstream_->stream.close();
        }
    }

    awaitable<void> run() {
        beast::get_lowest_layer(client_).expires_after(limits_.handshake_timeout);
        auto [ec] = co_await client_.async_handshake(asio::ssl::stream_base::server, kTuple);
        if (ec) {
            co_return;
        }
        while (co_await serve_request()) {
        }
        if (beast::get_lowest_layer(client_).socket().is_open()) {
            // close_notify (RFC 8446 §6.1), without waiting long for the peer's.
            beast::get_lowest_layer(client_).expires_after(std::chrono::seconds(2));
            co_await client_.async_shutdown(kTuple);
        }
    }

private:
    // One request, answered; whether the connection goes on.
    awaitable<bool> serve_request() {
        auto& lowest = beast::get_lowest_layer(client_);
        if (client_buffer_.size() == 0) {
            release_upstream_later();
            lowest.expires_after(limits_.idle_timeout);
            auto [ec, n] = co_await client_.async_read_some(client_buffer_.prepare(4096), kTuple);
            awaiting_next_ = false;
            keep_timer_.cancel();
            if (ec) {
                co_return false;
            }
            client_buffer_.commit(n);
        }
        RequestParser parser;
        parser.header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
        parser.body_limit(boost::none);
        lowest.expires_after(limits_.header_timeout);
        auto [ec, n] = co_await bhttp::async_read_header(client_, client_buffer_, parser, kTuple);
        if (ec == bhttp::error::header_limit) {
            co_return co_await send_page(431, explanation_of(431, false), 11, false);
        }
        if (ec) {
            // A parse error gets 400; a timeout or a closed connection nothing.
            if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category()) {
                co_return co_await send_page(400, explanation_of(400, false), 11, false);
            }
            co_return false;
        }
        auto& request = parser.get();
        const unsigned version = request.version();
        // A body not read yet would be taken for the next request: close after an early answer.
        const bool keep_alive = request.keep_alive() && parser.is_done();
        const std::string host(request[bhttp::field::host]);
        const std::string_view request_target = request.target();
        if (host.empty() || request_target.empty() ||
            (request_target.front() != '/' && request_target != "*")) {
            co_return co_await send_page(400, explanation_of(400, false), version, false);
        }
        auto name = parse_hosted_name(host, shared_->config.domain, shared_->config.services);
        if (!name) {
            co_return co_await send_page(404, explanation_of(404, false), version, keep_alive);
        }
        if (shared_->closed) {
            co_return false;  // the pool may be joined already
        }
        auto lookup = [backend = shared_->backend, hosted = *name] {
            return hosted.service.empty() ? backend->lookup(hosted.subdomain, hosted.port)
                                          : backend->lookup_service(hosted.subdomain, hosted.service);
        };
        auto target = co_await on_pool<Result<Target>>(shared_->pool, lookup);
        if (!target) {
            unsigned status = target.error().code == "not_found" ? 404 : 503;
            co_return co_await send_page(status, explanation_of(status, false), version, keep_alive);
        }
        note_activity(*target);
        if (!target->is_public) {
            if (auto query = take_query_token(request_target)) {
                if (target->token.empty() || !same_secret(query->token, target->token)) {
                    co_return co_await send_page(401, explanation_of(401, false), version, keep_alive);
                }
                const std::string location = "https://" + host + query->target_without;
                co_return co_await send_auth_redirect(location, target->token, version, keep_alive);
            }
            if (!carries_token(request, target->token)) {
                co_return co_await send_page(401, explanation_of(401, false), version, keep_alive);
            }
        }
        strip_credentials(request, target->token);
        co_return co_await forward(parser, *target, host);
    }

    // While the client's next request is awaited: the kept upstream link
    // goes after upstream_keep_timeout. The io_context has one thread, so
    // the handler and this coroutine never run at once; `alive` keeps the
    // handler away from a connection that ended.
    void release_upstream_later() {
        if (!upstream_) {
            return;
        }
        awaiting_next_ = true;
        keep_timer_.expires_after(limits_.upstream_keep_timeout);
        keep_timer_.async_wait([this, alive = std::weak_ptr<void>(alive_)](beast::error_code ec) {
            if (!ec && !alive.expired() && awaiting_next_) {
                upstream_.reset();
            }
        });
    }

    // Calls Backend::activity on the pool, at most once a second.
    void note_activity(const Target& target) {
        auto now = Clock::now();
        if (shared_->closed || now - last_activity_ < std::chrono::seconds(1)) {
            return;
        }
        last_activity_ = now;
        asio::post(shared_->pool, [backend = shared_->backend, target] { backend->activity(target); });
    }

    // The request (its header read, its body pending) to the app and its
    // response back; whether the connection goes on.
    awaitable<bool> forward(RequestParser& parser, const Target& target, const std::string& host) {
        auto& request = parser.get();
        const unsigned version = request.version();
        const bool websocket = beast::websocket::is_upgrade(request);
        const bool head_request = request.method() == bhttp::verb::head;
        const bool client_keep_alive = request.keep_alive();
        const bool expects_continue = beast::iequals(request[bhttp::field::expect], "100-continue");
        const std::string upgrade(request[bhttp::field::upgrade]);
        strip_hop_by_hop(request);
        request.erase(bhttp::field::expect);  // the proxy answers it itself (below)
        add_forwarded_fields(request, client_ip_, host);
        request.version(11);
        request.keep_alive(true);
        if (websocket) {
            request.set(bhttp::field::connection, "Upgrade");
            request.set(bhttp::field::upgrade, upgrade);
        }
        const bool has_body = !parser.is_done();
        for (unsigned attempt = 0;; ++attempt) {
            if (upstream_ && (upstream_->sandbox_id != target.sandbox_id || upstream_->port != target.port ||
                              upstream_->service != target.service)) {
                upstream_.reset();
            }
            if (!upstream_) {
                if (auto opened = co_await open_upstream(target); opened != 0) {
                    co_return co_await send_page(opened, explanation_of(opened, true), version,
                                                 client_keep_alive && !has_body);
                }
            }
            // An app may close a kept connection just as a request goes out
            // (RFC 9112 §9.3.1); a request without a body is sent again once.
            const bool may_retry = attempt == 0 && upstream_->served > 0 && !has_body;
            bhttp::serializer<true, bhttp::buffer_body> serializer(request);
            BodyRelay relay_request{limits_, [this, &target] { note_activity(target); }};
            if (expects_continue && has_body) {
                if (auto written = co_await relay_request.write_header(upstream_->stream, serializer);
                    !written) {
                    upstream_.reset();
                    co_return co_await send_page(502, explanation_of(502, true), version, false);
                }
                static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
                beast::get_lowest_layer(client_).expires_after(limits_.write_timeout);
                auto [ec, n] = co_await asio::async_write(client_, asio::buffer(kContinue), kTuple);
                if (ec) {
                    co_return false;
                }
            }
            auto sent =
                co_await relay_request.relay(client_, client_buffer_, parser, upstream_->stream, serializer);
            if (sent == RelayEnd::input_failed) {
                co_return false;  // the client went away mid-body
            }
            if (sent == RelayEnd::output_failed) {
                upstream_.reset();
                if (may_retry) {
                    continue;
                }
                co_return co_await send_page(502, explanation_of(502, true), version, false);
            }
            auto outcome = co_await relay_response(target, version, client_keep_alive, head_request,
                                                   websocket, may_retry);
            if (outcome == ResponseOutcome::retry) {
                upstream_.reset();
                continue;
            }
            co_return outcome == ResponseOutcome::keep_alive;
        }
    }

    // Backend::connect on the pool; 0, or the status of the page to send.
    awaitable<unsigned> open_upstream(const Target& target) {
        if (shared_->closed) {
            co_return 503u;
        }
        auto connect = [backend = shared_->backend, target] { return backend->connect(target); };
        auto connected = co_await on_pool<Result<Upstream>>(shared_->pool, connect);
        if (!connected) {
            co_return status_of_connect_error(connected.error());
        }
        auto link = adopt_upstream(client_.get_executor(), std::move(*connected), target);
        if (!link) {
            co_return 502u;
        }
        upstream_ = std::move(*link);
        co_return 0u;
    }

    enum class ResponseOutcome { keep_alive, close, retry };

    awaitable<ResponseOutcome> relay_response(const Target& target, unsigned version, bool client_keep_alive,
                                              bool head_request, bool websocket, bool may_retry) {
        auto& stream = upstream_->stream;
        std::optional<ResponseParser> parser;
        for (std::size_t interim = 0;; ++interim) {
            parser.emplace();
            parser->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
            parser->body_limit(boost::none);
            parser->skip(head_request);
            stream.expires_after(limits_.response_timeout);
            auto [ec, n] = co_await bhttp::async_read_header(stream, upstream_->buffer, *parser, kTuple);
            if (ec) {
                upstream_.reset();
                if (may_retry && interim == 0 &&
                    (ec == bhttp::error::end_of_stream || ec == asio::error::connection_reset)) {
                    co_return ResponseOutcome::retry;
                }
                unsigned status = ec == beast::error::timeout ? 504 : 502;
                co_return co_await send_page(status, explanation_of(status, false), version, false)
                    ? ResponseOutcome::keep_alive
                    : ResponseOutcome::close;
            }
            const unsigned status = parser->get().result_int();
            if (status / 100 != 1 || status == 101) {
                break;
            }
            if (interim == kMaxInterimResponses) {
                upstream_.reset();
                co_return co_await send_page(502, explanation_of(502, false), version, false)
                    ? ResponseOutcome::keep_alive
                    : ResponseOutcome::close;
            }
            // An interim response (103 Early Hints, say) goes on to the client as it is.
            bhttp::response<bhttp::empty_body> hint(parser->get().result(), 11);
            for (const auto& field : parser->get()) {
                hint.insert(field.name_string(), field.value());
            }
            strip_hop_by_hop(hint);
            beast::get_lowest_layer(client_).expires_after(limits_.write_timeout);
            if (auto [wec, wn] = co_await bhttp::async_write(client_, hint, kTuple); wec) {
                co_return ResponseOutcome::close;
            }
        }
        auto& response = parser->get();
        const unsigned status = response.result_int();
        if (status == 101) {
            if (!websocket || !beast::iequals(response[bhttp::field::upgrade], "websocket")) {
                upstream_.reset();
                co_return co_await send_page(502, explanation_of(502, false), version, false)
                    ? ResponseOutcome::keep_alive
                    : ResponseOutcome::close;
            }
            const std::string upgrade(response[bhttp::field::upgrade]);
            strip_hop_by_hop(response);
            response.set(bhttp::field::connection, "Upgrade");
            response.set(bhttp::field::upgrade, upgrade);
            bhttp::serializer<false, bhttp::buffer_body> serializer(response);
            BodyRelay relay{limits_, {}};
            if (co_await relay.write_header(client_, serializer)) {
                co_await splice(target);
            }
            co_return ResponseOutcome::close;
        }
        const bool app_keep_alive = parser->keep_alive();
        const bool bodiless = head_request || status == 204 || status == 304;
        // A body that ends when the app closes (RFC 9112 §6.3 item 8) goes
        // on chunked to an HTTP/1.1 client, which keeps its connection.
        const bool close_delimited =
            !bodiless && !parser->is_done() && !parser->chunked() && !parser->content_length();
        strip_hop_by_hop(response);
        response.version(version);
        if (close_delimited && version == 11) {
            response.chunked(true);
        }
        response.keep_alive(client_keep_alive && !(close_delimited && version != 11));
        const bool client_goes_on = response.keep_alive();
        bhttp::serializer<false, bhttp::buffer_body> serializer(response);
        BodyRelay relay{limits_, [this, &target] { note_activity(target); }};
        RelayEnd end = RelayEnd::done;
        if (bodiless) {
            end = co_await relay.write_header(client_, serializer) ? RelayEnd::done : RelayEnd::output_failed;
        } else {
            end = co_await relay.relay(stream, upstream_->buffer, *parser, client_, serializer);
        }
        ++upstream_->served;
        if (end != RelayEnd::done || !app_keep_alive || (bodiless && !parser->is_done())) {
            upstream_.reset();
        }
        co_return end == RelayEnd::done&& client_goes_on ? ResponseOutcome::keep_alive
                                                         : ResponseOutcome::close;
    }

    // Raw bytes both ways until either side ends or both stay silent for
    // websocket_idle_timeout.
    awaitable<void> splice(const Target& target) {
        using namespace asio::experimental::awaitable_operators;
        auto& client_lowest = beast::get_lowest_layer(client_);
        client_lowest.expires_never();
        upstream_->stream.expires_never();
        // What either side sent past the handshake's header goes first.
        if (client_buffer_.size() > 0) {
            if (auto [ec, n] = co_await asio::async_write(upstream_->stream, client_buffer_.data(), kTuple);
                ec) {
                co_return;
            }
            client_buffer_.consume(client_buffer_.size());
        }
        if (upstream_->buffer.size() > 0) {
            if (auto [ec, n] = co_await asio::async_write(client_, upstream_->buffer.data(), kTuple); ec) {
                co_return;
            }
            upstream_->buffer.consume(upstream_->buffer.size());
        }
        asio::steady_timer watchdog(client_.get_executor());
        SpliceState state{Clock::now(), false, watchdog};
        co_await (pump(client_, upstream_->stream, state, target) &&
                  pump(upstream_->stream, client_, state, target) && watch(state));
    }

    struct SpliceState {
        Clock::time_point last_traffic;
        bool ended;
        asio::steady_timer& watchdog;
    };

    template <typename From, typename To>
    awaitable<void> pump(From& from, To& to, SpliceState& state, const Target& target) {
        std::array<char, 16 * 1024> chunk{};
        while (!state.ended) {
            auto [ec, n] = co_await from.async_read_some(asio::buffer(chunk), kTuple);
            if (ec) {
                break;
            }
            state.last_traffic = Clock::now();
            note_activity(target);
            if (auto [wec, wn] = co_await asio::async_write(to, asio::buffer(chunk.data(), n), kTuple); wec) {
                break;
            }
        }
        if (!state.ended) {
            state.ended = true;
            beast::get_lowest_layer(client_).cancel();
            upstream_->stream.cancel();
            state.watchdog.cancel();
        }
    }

    awaitable<void> watch(SpliceState& state) {
        while (!state.ended) {
            auto quiet_until = state.last_traffic + limits_.websocket_idle_timeout;
            if (Clock::now() >= quiet_until) {
                state.ended = true;
                beast::get_lowest_layer(client_).cancel();
                upstream_->stream.cancel();
                break;
            }
            state.watchdog.expires_at(quiet_until);
            co_await state.watchdog.async_wait(kTuple);
        }
    }

    awaitable<bool> send_page(unsigned status, std::string_view explanation, unsigned version,
                              bool keep_alive) {
        bhttp::response<bhttp::string_body> response(static_cast<bhttp::status>(status),
                                                     version == 10 ? 10 : 11);
        response.set(bhttp::field::content_type, "text/html; charset=utf-8");
        response.set(bhttp::field::cache_control, "no-store");
        if (status == 401) {
            response.set(bhttp::field::www_authenticate, "Bearer realm=\"sandboxer\"");  // RFC 9110 §15.5.2
        }
        response.body() = error_page(status, explanation);
        co_return co_await write_answer(response, keep_alive);
    }

    awaitable<bool> send_auth_redirect(const std::string& location, const std::string& token,
                                       unsigned version, bool keep_alive) {
        bhttp::response<bhttp::string_body> response(bhttp::status::found, version == 10 ? 10 : 11);
        response.set(bhttp::field::location, location);
        response.set(bhttp::field::set_cookie, auth_cookie(token));
        response.set(bhttp::field::cache_control, "no-store");
        response.set("Referrer-Policy", "no-referrer");  // the token is in this request's URL
        co_return co_await write_answer(response, keep_alive);
    }

    awaitable<bool> write_answer(bhttp::response<bhttp::string_body>& response, bool keep_alive) {
        response.keep_alive(keep_alive);
        response.prepare_payload();
        beast::get_lowest_layer(client_).expires_after(limits_.write_timeout);
        auto [ec, n] = co_await bhttp::async_write(client_, response, kTuple);
        co_return !ec && keep_alive;
    }

    std::shared_ptr<Proxy::Shared> shared_;
    const ProxyLimits& limits_;
    ClientStream client_;
    beast::flat_buffer client_buffer_;
    std::string client_ip_;
    std::unique_ptr<UpstreamLink> upstream_;
    Clock::time_point last_activity_{};
    asio::steady_timer keep_timer_;
    bool awaiting_next_ = false;
    std::shared_ptr<void> alive_ = std::make_shared<char>();
};

}  // namespace

awaitable<void> serve_client(std::shared_ptr<Proxy::Shared> shared, tcp::socket socket) {
    ClientConnection connection(std::move(shared), std::move(socket));
    co_await connection.run();
}

}  // namespace sbx::sbxd::proxy::detail

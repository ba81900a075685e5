// One WebSocket connection (RFC 6455) of the Server, after an HTTP
// Session handed over its socket and the handshake request (session.hpp).
// On the io_context: the handshake's 101 (§4.2.2), one read and one write
// at a time, Beast's pings and close handshake; the route's WsHandler runs
// on a stream thread and talks to this through a WsChannel.
//
// Limits: a message over ServerLimits::ws_max_message_bytes fails the
// connection with 1009 (§7.4.1), text that is not UTF-8 with 1007 (§8.1),
// both done by Beast; a peer that answers nothing, not even the pings
// sent at half ws_idle_timeout, is dropped after ws_idle_timeout.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <memory>
#include <string>

#include "base/log.hpp"
#include "host-tools/sbxd/http/server.hpp"

namespace sbx::sbxd::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace websocket = boost::beast::websocket;

// The handshake's fields besides what is_upgrade() checks (§4.2.1):
// HTTP/1.1 with a Host field, version 13 and a key of 16 bytes in base64
// (all that Beast's accept checks, so that none of its plain-text 400s
// replaces the API's JSON error). Why not, or "".
inline std::string bad_handshake(const bhttp::request_header<>& header) {
    if (header.version() != 11 || header.count(bhttp::field::host) == 0) {
        return "a WebSocket handshake is an HTTP/1.1 request with a Host field (RFC 6455 §4.1)";
    }
    if (header[bhttp::field::sec_websocket_version] != "13") {
        return "Sec-WebSocket-Version must be 13 (RFC 6455 §4.2.1)";
    }
    auto key = header[bhttp::field::sec_websocket_key];
    if (key.size() != 24 || key.substr(22) != "==") {
        return "Sec-WebSocket-Key must be 16 bytes in base64 (RFC 6455 §4.2.1)";
    }
    return "";
}

template <typename Protocol>
class WsSession : public std::enable_shared_from_this<WsSession<Protocol>> {
public:
    using Stream = beast::basic_stream<Protocol, asio::any_io_executor, beast::unlimited_rate_policy>;

    WsSession(Stream stream, const ServerLimits& limits)
        : ws_(std::move(stream)), limits_(limits), keepalive_(ws_.get_executor()) {}

    // Starts `handler` on a stream thread, then answers the handshake;
    // when no thread is free, answers 503 capacity_exceeded instead.
    void start(StreamThreads& threads, bhttp::request<bhttp::string_body> request, WsHandler handler,
               std::string request_id, std::string protocol = {}) {
        channel_ = std::make_shared<WsChannel>(limits_.stream_buffer_bytes, limits_.stream_buffer_bytes,
                                               [weak = this->weak_from_this()] {
                                                   if (auto s = weak.lock()) {
                                                       asio::post(s->ws_.get_executor(), [s] { s->pump(); });
                                                   }
                                               });
        bool started = threads.start(
            limits_.max_streams,
            [channel = channel_, handler = std::move(handler), request_id] {
                try {
                    handler(*channel);
                    channel->close(WsClose{ws_close::kNormal, ""});
                } catch (const std::exception& e) {
                    log::error("request {}: the WebSocket handler failed: {}", request_id, e.what());
                    channel->close(WsClose{ws_close::kInternalError, "internal error"});
                }
            },
            [channel = channel_] {
                // The server is stopping: a handler blocked elsewhere is
                // unblocked through its gone hook, as if the client left.
                channel->close(WsClose{ws_close::kGoingAway, "the server is stopping"});
                channel->peer_gone();
            });
        if (!started) {
            return refuse(request_id);
        }
        // Alive until the connection is over: while the handler is behind
        // (no read pending, nothing to write) no other operation holds it.
        // A pending wait rather than a pointer to itself, so that an
        // io_context that stops first still frees it with its handlers.
        keepalive_.expires_at(asio::steady_timer::time_point::max());
        keepalive_.async_wait([self = this->shared_from_this()](beast::error_code) {});
        beast::get_lowest_layer(ws_).expires_never();
        websocket::stream_base::timeout timeout{};
        timeout.handshake_timeout = limits_.write_timeout;
        timeout.idle_timeout = limits_.ws_idle_timeout;
        timeout.keep_alive_pings = true;
        ws_.set_option(timeout);
        ws_.set_option(websocket::stream_base::decorator([request_id, protocol](websocket::response_type& reply) {
            reply.set(bhttp::field::server, "sbxd");
            reply.set("X-Request-Id", request_id);
            if (!protocol.empty()) {
                reply.set(bhttp::field::sec_websocket_protocol, protocol);
            }
        }));
        ws_.read_message_max(limits_.ws_max_message_bytes);
        ws_.auto_fragment(false);
        auto held = std::make_shared<bhttp::request<bhttp::string_body>>(std::move(request));
        ws_.async_accept(*held, [self = this->shared_from_this(), held](beast::error_code ec) {
            if (ec) {
                return self->gone();
            }
            self->open_ = true;
            self->read();
            self->pump();
        });
    }

private:
    void refuse(const std::string& request_id) {
        auto reply =
            std::make_shared<bhttp::response<bhttp::string_body>>(bhttp::status::service_unavailable, 11);
        reply->set(bhttp::field::server, "sbxd");
        reply->set(bhttp::field::content_type, "application/json");
        reply->set("X-Request-Id", request_id);
        reply->body() = api::error_body(api::ApiError{503, std::string(api::code::kCapacityExceeded),
                                                      "too many streams are open; retry later"},
                                        request_id);
        reply->keep_alive(false);
        reply->prepare_payload();
        auto& stream = ws_.next_layer();
        stream.expires_after(limits_.write_timeout);
        bhttp::async_write(
            stream, *reply, [self = this->shared_from_this(), reply](beast::error_code, std::size_t) {
                beast::error_code ignored;
                self->ws_.next_layer().socket().shutdown(Protocol::socket::shutdown_both, ignored);
                self->ws_.next_layer().close();
            });
    }

    void read() {
        if (!open_ || reading_ || done_ || !channel_->has_room()) {
            return;
        }
        reading_ = true;
        ws_.async_read(buffer_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
            self->reading_ = false;
            if (ec) {
                // websocket::error::closed: the client's close frame was
                // answered; others (1007, 1009, a reset) end it too.
                return self->gone();
            }
            WsMessage message{self->ws_.got_text(), beast::buffers_to_string(self->buffer_.data())};
            self->buffer_.consume(self->buffer_.size());
            if (self->channel_->push(std::move(message))) {
                self->read();
            }
        });
    }

    void pump() {
        if (!open_ || done_) {
            return;
        }
        read();  // the handler made room
        if (writing_ || close_sent_) {
            return;
        }
        if (auto message = channel_->take()) {
            writing_ = true;
            auto data = std::make_shared<std::string>(std::move(message->data));
            ws_.text(message->text);
            ws_.async_write(asio::buffer(*data),
                            [self = this->shared_from_this(), data](beast::error_code ec, std::size_t) {
                                self->writing_ = false;
                                if (ec) {
                                    return self->gone();
                                }
                                self->pump();
                            });
            return;
        }
        if (auto close = channel_->closing()) {
            close_sent_ = true;
            websocket::close_reason reason;
            reason.code = close->code;  // close_reason's constructor takes only Beast's named codes
            reason.reason = close->reason;
            ws_.async_close(reason, [self = this->shared_from_this()](beast::error_code) { self->gone(); });
        }
    }

    // The connection is over (closed, failed or timed out).
    void gone() {
        if (done_) {
            return;
        }
        done_ = true;
        keepalive_.cancel();  // its handler, run later, lets go of this
        channel_->peer_gone();
        if (!close_sent_) {
            // Ends a pending read or write; a close handshake under way
            // ends by itself (Beast closes the socket after it).
            beast::error_code ignored;
            beast::get_lowest_layer(ws_).socket().close(ignored);
        }
    }

    websocket::stream<Stream> ws_;
    ServerLimits limits_;
    std::shared_ptr<WsChannel> channel_;
    beast::flat_buffer buffer_;
    bool open_ = false;
    bool reading_ = false;
    bool writing_ = false;
    bool close_sent_ = false;
    bool done_ = false;
    asio::steady_timer keepalive_;
};

}  // namespace sbx::sbxd::http::detail

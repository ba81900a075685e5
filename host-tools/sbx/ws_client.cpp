#include "host-tools/sbx/ws_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <deque>

#include "host-tools/sbx/host_connect.hpp"

namespace sbx::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using Socket = asio::generic::stream_protocol::socket;

Json ws_start_message(Json exec_body, std::optional<TtySize> tty) {
    exec_body.erase("stdin");
    exec_body.erase("detach");
    if (tty) {
        exec_body["tty"] = {{"rows", tty->rows}, {"cols", tty->cols}};
    }
    return exec_body;
}

std::string ws_resize_message(TtySize size) {
    return Json{{"type", "resize"}, {"rows", size.rows}, {"cols", size.cols}}.dump();
}

std::string ws_signal_message(int signal) {
    return Json{{"type", "signal"}, {"signal", signal}}.dump();
}

std::string ws_eof_message() {
    return R"({"type":"eof"})";
}

Result<WsOutput> decode_ws_output(std::string_view frame) {
    if (frame.empty() || (frame[0] != 1 && frame[0] != 2)) {
        return make_coded_error("bad_response", "an output frame from sbxd without a stream byte of 1 or 2");
    }
    return WsOutput{frame[0], frame.substr(1)};
}

struct WsExecClient::Impl {
    asio::io_context io;
    websocket::stream<Socket> ws{io};
    beast::flat_buffer buffer;
    struct Outgoing {
        bool text;
        std::string data;
        std::function<void()> sent;
    };
    std::deque<Outgoing> queue;
    bool writing = false;
    bool closing = false;
    bool close_sent = false;
    bool done = false;
    Handlers handlers;

    void finish(std::uint16_t code, std::string reason) {
        if (done) {
            return;
        }
        done = true;
        if (handlers.closed) {
            handlers.closed(code, std::move(reason));
        }
        beast::error_code ignored;
        ws.next_layer().close(ignored);
    }

    void read() {
        ws.async_read(buffer, [this](beast::error_code ec, std::size_t) {
            if (ec) {
                const auto& reason = ws.reason();
                return finish(
                    ec == websocket::error::closed ? reason.code : 0,
                    ec == websocket::error::closed ? std::string(reason.reason.c_str()) : ec.message());
            }
            std::string data = beast::buffers_to_string(buffer.data());
            buffer.consume(buffer.size());
            if (handlers.message) {
                handlers.message(ws.got_text(), data);
            }
            if (!done) {
                read();
            }
        });
    }

    void pump() {
        if (writing || done || close_sent) {
            return;
        }
        if (queue.empty()) {
            if (closing) {
                close_sent = true;
                ws.async_close(websocket::close_code::normal, [](beast::error_code) {});
            }
            return;
        }
        writing = true;
        ws.text(queue.front().text);
        ws.async_write(asio::buffer(queue.front().data), [this](beast::error_code ec, std::size_t) {
            writing = false;
            auto sent = std::move(queue.front().sent);
            queue.pop_front();
            if (ec) {
                return finish(0, ec.message());
            }
            if (sent) {
                sent();
            }
            pump();
        });
    }
};

WsExecClient::WsExecClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WsExecClient::~WsExecClient() = default;

Result<WsExecClient::Opened> WsExecClient::open(const HostAddress& address, const std::string& api_key,
                                                const std::string& target) {
    auto impl = std::make_unique<Impl>();
    if (auto connected = connect_to_host(impl->ws.next_layer(), impl->io, address); !connected) {
        return connected.error();
    }
    beast::error_code ec;
    const bool tcp = address.kind == HostAddress::Kind::Tcp;
    impl->ws.set_option(websocket::stream_base::decorator([&](websocket::request_type& request) {
        request.set(beast::http::field::user_agent, "sbx/0.1.0");
        if (tcp && !api_key.empty()) {
            request.set(beast::http::field::authorization, "Bearer " + api_key);
        }
    }));
    impl->ws.read_message_max(0);  // sbxd's frames are bounded by the agent's
    impl->ws.auto_fragment(false);
    websocket::response_type reply;
    impl->ws.handshake(reply, tcp ? address.host : "sbxd", target, ec);
    if (ec == websocket::error::upgrade_declined) {
        HttpReply declined;
        declined.status = reply.result_int();
        declined.content_type = std::string(reply[beast::http::field::content_type]);
        declined.request_id = std::string(reply["X-Request-Id"]);
        declined.retry_after = std::string(reply[beast::http::field::retry_after]);
        declined.body = reply.body();
        return Opened{nullptr, std::move(declined)};
    }
    if (ec) {
        return make_coded_error("connection_lost", "the WebSocket handshake with sbxd failed: {}",
                                ec.message());
    }
    return Opened{std::unique_ptr<WsExecClient>(new WsExecClient(std::move(impl))), std::nullopt};
}

void WsExecClient::send(bool text, std::string data, std::function<void()> sent) {
    impl_->queue.push_back(Impl::Outgoing{text, std::move(data), std::move(sent)});
    impl_->pump();
}

void WsExecClient::post(std::function<void()> fn) {
    asio::post(impl_->io, std::move(fn));
}

void WsExecClient::run(Handlers handlers) {
    impl_->handlers = std::move(handlers);
    impl_->read();
    impl_->pump();
    impl_->io.run();
}

void WsExecClient::abort() {
    impl_->finish(0, "sbx gave up");
}

void WsExecClient::close() {
    impl_->closing = true;
    impl_->pump();
}

}  // namespace sbx::cli

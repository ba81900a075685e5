// WebSockets on the Beast server (ws_session.hpp, ws_channel.hpp) over a
// real Unix socket with Beast's client: messages both ways, the close
// codes of RFC 6455 §7.4.1 for oversized and non-UTF-8 messages, a
// handler's own close code, backpressure, and the HTTP errors for a
// handshake to the wrong route or a bad one.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "host-tools/sbxd/http/router.hpp"
#include "host-tools/sbxd/http/server.hpp"

using namespace sbx;
using namespace sbx::sbxd;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using Local = asio::local::stream_protocol;

namespace {

struct Running {
    std::string dir;
    std::string socket;
    asio::io_context io;
    asio::thread_pool workers{2};
    http::Router router;
    std::unique_ptr<http::Server> server;
    std::thread io_thread;
    std::atomic<int> sent{0};

    Running() {
        std::string templ = (std::filesystem::temp_directory_path() / "sbxd-ws-XXXXXX").string();
        REQUIRE(::mkdtemp(templ.data()) != nullptr);
        dir = templ;
        socket = dir + "/s.sock";
        // Echoes each message until the client says "close NNNN".
        router.add(
            "GET", "/echo",
            [](const http::Request&, const http::PathParams&) {
                http::Response r;
                r.websocket = [](http::WsChannel& channel) {
                    while (auto m = channel.receive()) {
                        if (m->text && m->data.starts_with("close ")) {
                            channel.close(http::WsClose{
                                static_cast<std::uint16_t>(std::stoi(m->data.substr(6))), "not_found"});
                            return;
                        }
                        if (!channel.send(std::move(*m))) {
                            return;
                        }
                    }
                };
                return r;
            },
            http::BodyMode::WebSocket);
        // Sends 64 KiB messages as fast as the client lets it.
        router.add(
            "GET", "/flood",
            [this](const http::Request&, const http::PathParams&) {
                http::Response r;
                r.websocket = [this](http::WsChannel& channel) {
                    while (channel.send(http::WsMessage{false, std::string(64 * 1024, 'x')})) {
                        ++sent;
                    }
                };
                return r;
            },
            http::BodyMode::WebSocket);
        router.add("GET", "/plain", [](const http::Request& req, const http::PathParams&) {
            return http::Response::ok({}, req.request_id);
        });
        http::ServerLimits limits;
        limits.ws_max_message_bytes = 4096;
        limits.stream_buffer_bytes = 256 * 1024;
        server = std::make_unique<http::Server>(
            io, workers, [this](http::Request r) { return router.dispatch(r); }, limits);
        auto bound = server->listen({http::Transport::Unix, socket, "", 0});
        REQUIRE_MESSAGE(bound.has_value(), (bound ? "" : bound.error().to_string()));
        io_thread = std::thread([this] { io.run(); });
    }
    ~Running() {
        asio::post(io, [this] {
            server->close();
            io.stop();
        });
        io_thread.join();
        workers.join();
        server.reset();  // cancels the handlers still running and joins them
        std::filesystem::remove_all(dir);
    }
};

struct Client {
    asio::io_context io;
    websocket::stream<Local::socket> ws{io};
    explicit Client(const std::string& socket) { ws.next_layer().connect(Local::endpoint(socket)); }
    void handshake(const std::string& target) { ws.handshake("sbxd", target); }
};

// A raw HTTP request; the reply's status and body.
std::pair<unsigned, std::string> raw(const std::string& socket,
                                     beast::http::request<beast::http::empty_body> req) {
    asio::io_context io;
    Local::socket s(io);
    s.connect(Local::endpoint(socket));
    req.set(beast::http::field::host, "sbxd");
    beast::http::write(s, req);
    beast::flat_buffer buffer;
    beast::http::response<beast::http::string_body> reply;
    beast::http::read(s, buffer, reply);
    return {reply.result_int(), reply.body()};
}

beast::http::request<beast::http::empty_body> upgrade(const std::string& target,
                                                      const std::string& version = "13") {
    beast::http::request<beast::http::empty_body> req{beast::http::verb::get, target, 11};
    req.set(beast::http::field::connection, "Upgrade");
    req.set(beast::http::field::upgrade, "websocket");
    req.set(beast::http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
    req.set(beast::http::field::sec_websocket_version, version);
    return req;
}

}  // namespace

TEST_CASE("text and binary messages echo, and the handler's end is close 1000") {
    Running server;
    Client client(server.socket);
    client.handshake("/echo");
    client.ws.text(true);
    client.ws.write(asio::buffer(std::string("hello")));
    beast::flat_buffer buffer;
    client.ws.read(buffer);
    CHECK(client.ws.got_text());
    CHECK(beast::buffers_to_string(buffer.data()) == "hello");
    buffer.clear();
    client.ws.binary(true);
    std::string blob("a\0b\xff", 4);
    client.ws.write(asio::buffer(blob));
    client.ws.read(buffer);
    CHECK_FALSE(client.ws.got_text());
    CHECK(beast::buffers_to_string(buffer.data()) == blob);
    client.ws.close(websocket::close_code::normal);
}

TEST_CASE("a handler's application close code and reason reach the client") {
    Running server;
    Client client(server.socket);
    client.handshake("/echo");
    client.ws.text(true);
    client.ws.write(asio::buffer(std::string("close 4404")));
    beast::flat_buffer buffer;
    beast::error_code ec;
    client.ws.read(buffer, ec);
    CHECK(ec == websocket::error::closed);
    CHECK(client.ws.reason().code == 4404);
    CHECK(std::string(client.ws.reason().reason.c_str()) == "not_found");
}

TEST_CASE("a message over the limit is close 1009, text that is not UTF-8 1007") {
    Running server;
    {
        Client client(server.socket);
        client.handshake("/echo");
        client.ws.binary(true);
        client.ws.write(asio::buffer(std::string(5000, 'x')));
        beast::flat_buffer buffer;
        beast::error_code ec;
        client.ws.read(buffer, ec);
        CHECK(ec == websocket::error::closed);
        CHECK(client.ws.reason().code == websocket::close_code::too_big);
    }
    {
        Client client(server.socket);
        client.handshake("/echo");
        client.ws.text(true);
        client.ws.write(asio::buffer(std::string("\xc3\x28")));
        beast::flat_buffer buffer;
        beast::error_code ec;
        client.ws.read(buffer, ec);
        CHECK(ec == websocket::error::closed);
        CHECK(client.ws.reason().code == websocket::close_code::bad_payload);
    }
}

TEST_CASE("a client that does not read holds the handler back") {
    Running server;
    Client client(server.socket);
    client.handshake("/flood");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    int before = server.sent.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    // The channel's 256 KiB plus what the sockets hold, then nothing more.
    CHECK(server.sent.load() == before);
    CHECK(before < 200);
    beast::flat_buffer buffer;
    for (int i = 0; i < 50; ++i) {
        client.ws.read(buffer);
        buffer.clear();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(server.sent.load() > before);
    client.ws.next_layer().close();
}

TEST_CASE("a handshake to another route, a plain request to a WebSocket, a bad handshake: HTTP errors") {
    Running server;
    auto [status, body] = raw(server.socket, upgrade("/plain"));
    CHECK(status == 400);
    CHECK(body.find("\"code\":\"bad_request\"") != std::string::npos);
    CHECK(raw(server.socket, upgrade("/nowhere")).first == 404);
    beast::http::request<beast::http::empty_body> plain{beast::http::verb::get, "/echo", 11};
    auto [plain_status, plain_body] = raw(server.socket, plain);
    CHECK(plain_status == 400);
    CHECK(plain_body.find("is a WebSocket") != std::string::npos);
    CHECK(raw(server.socket, upgrade("/echo", "8")).first == 400);
    auto no_key = upgrade("/echo");
    no_key.erase(beast::http::field::sec_websocket_key);
    CHECK(raw(server.socket, no_key).first == 400);
}

// TCP over a WebSocket apart from any server: the control message, the
// pending guest connections of reverse forwards, and relay_tcp between a
// WsChannel (driven here as the io_context would) and a socketpair
// standing for the guest connection: bytes, a half-close each way, the
// close code, a client that leaves.
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "host-tools/sbxd/daemon/tcp_pending.hpp"
#include "host-tools/sbxd/daemon/tcp_relay.hpp"
#include "host-tools/sbxd/daemon/ws_exec.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using namespace std::chrono_literals;

namespace {

std::pair<UniqueFd, UniqueFd> socket_pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Everything `fd` sends until its end of stream.
std::string read_to_end(int fd) {
    std::string out;
    char buffer[4096];
    while (true) {
        ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n <= 0) {
            return out;
        }
        out.append(buffer, static_cast<std::size_t>(n));
    }
}

// The io_context's side: what the handler sent, until its close frame (or 5 s).
struct Sent {
    std::vector<http::WsMessage> messages;
    std::optional<http::WsClose> close;
};
Sent drain(http::WsChannel& channel) {
    Sent sent;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
        while (auto message = channel.take()) {
            sent.messages.push_back(std::move(*message));
        }
        if ((sent.close = channel.closing())) {
            return sent;
        }
        std::this_thread::sleep_for(1ms);
    }
    return sent;
}

}  // namespace

TEST_CASE("the only control message is eof") {
    CHECK(read_tcp_control(R"({"type":"eof"})").has_value());
    auto other = read_tcp_control(R"({"type":"resize","rows":1,"cols":1})");
    REQUIRE_FALSE(other);
    CHECK(ws_close_for(other.error()).code == http::ws_close::kUnsupportedData);
    auto not_json = read_tcp_control("eof");
    REQUIRE_FALSE(not_json);
    CHECK(ws_close_for(not_json.error()).code == http::ws_close::kInvalidPayload);
    auto extra = read_tcp_control(R"({"type":"eof","now":true})");
    REQUIRE_FALSE(extra);
    CHECK(ws_close_for(extra.error()).code == http::ws_close::kApplicationBase + 400);
    CHECK(tcp_eof_message().text);
}

TEST_CASE("pending guest connections: taken once, by their sandbox, until they expire") {
    PendingTcpConnections pending;
    const auto listener = pending.new_listener();
    CHECK(pending.new_listener() != listener);
    CHECK(PendingTcpConnections::vsock_port(listener) >= (1U << 30));
    CHECK(PendingTcpConnections::vsock_port(listener + 1) != PendingTcpConnections::vsock_port(listener));
    const auto later = PendingTcpConnections::Clock::now() + 30s;

    auto [a, a_peer] = socket_pair();
    auto id = pending.add("sbx_1", listener, std::move(a), later);
    REQUIRE(id);
    CHECK(id->size() == 17);
    CHECK(id->front() == 'c');
    CHECK_FALSE(pending.take("sbx_2", *id));  // another sandbox's: not there
    auto taken = pending.take("sbx_1", *id);
    REQUIRE(taken);
    CHECK(taken->get() >= 0);
    CHECK_FALSE(pending.take("sbx_1", *id));  // once

    auto [b, b_peer] = socket_pair();
    auto expiring = pending.add("sbx_1", listener, std::move(b), PendingTcpConnections::Clock::now());
    REQUIRE(expiring);
    pending.expire(listener + 7, PendingTcpConnections::Clock::now() + 1s);  // another listener's: kept
    pending.expire(listener, PendingTcpConnections::Clock::now() + 1s);
    CHECK_FALSE(pending.take("sbx_1", *expiring));
    CHECK(read_to_end(b_peer.get()).empty());  // closed: the guest sees the end

    std::vector<UniqueFd> peers;
    for (std::size_t i = 0; i < PendingTcpConnections::kPerListener; ++i) {
        auto [c, c_peer] = socket_pair();
        peers.push_back(std::move(c_peer));
        REQUIRE(pending.add("sbx_1", listener, std::move(c), later));
    }
    auto [d, d_peer] = socket_pair();
    auto over = pending.add("sbx_1", listener, std::move(d), later);
    REQUIRE_FALSE(over);
    CHECK(over.error().code == "limit_reached");
    pending.expire(listener, PendingTcpConnections::Clock::time_point::max());  // the listener ended
}

TEST_CASE("relay_tcp: bytes and a half-close each way, then 1000") {
    http::WsChannel channel(1 << 20, 1 << 20, [] {});
    auto [stream, guest] = socket_pair();
    std::thread relay([&, s = std::move(stream)]() mutable { relay_tcp(channel, std::move(s), {'h', 'i'}, "req_1"); });

    REQUIRE(channel.push(http::WsMessage{false, "hello "}));
    REQUIRE(channel.push(http::WsMessage{false, "guest"}));
    REQUIRE(channel.push(tcp_eof_message()));
    CHECK(read_to_end(guest.get()) == "hello guest");  // the client's eof is the guest's end of stream

    // The other direction goes on after it.
    const std::string big(200000, 'x');
    std::thread writer([&] {
        CHECK(write_all(guest.get(), big.data(), big.size()).has_value());
        ::shutdown(guest.get(), SHUT_WR);
    });
    Sent sent = drain(channel);
    writer.join();
    relay.join();
    REQUIRE(sent.close);
    CHECK(sent.close->code == http::ws_close::kNormal);
    REQUIRE(sent.messages.size() >= 3);
    CHECK_FALSE(sent.messages.front().text);
    CHECK(sent.messages.front().data == "hi");  // what came with the agent's reply, first
    std::string back;
    for (std::size_t i = 1; i + 1 < sent.messages.size(); ++i) {
        CHECK_FALSE(sent.messages[i].text);
        CHECK(sent.messages[i].data.size() <= kTcpChunkBytes);
        back += sent.messages[i].data;
    }
    CHECK(back == big);
    CHECK(sent.messages.back().text);
    CHECK(sent.messages.back().data == R"({"type":"eof"})");
}

TEST_CASE("relay_tcp: a client that leaves ends the guest connection both ways") {
    http::WsChannel channel(1 << 20, 1 << 20, [] {});
    auto [stream, guest] = socket_pair();
    std::thread relay([&, s = std::move(stream)]() mutable { relay_tcp(channel, std::move(s), {}, "req_2"); });
    REQUIRE(channel.push(http::WsMessage{false, "partial"}));
    std::string got(7, '\0');
    std::size_t have = 0;
    while (have < got.size()) {
        ssize_t n = ::read(guest.get(), got.data() + have, got.size() - have);
        REQUIRE(n > 0);
        have += static_cast<std::size_t>(n);
    }
    CHECK(got == "partial");
    channel.peer_gone();
    relay.join();
    CHECK(read_to_end(guest.get()).empty());
}

TEST_CASE("relay_tcp: a control message other than eof closes with 1003") {
    http::WsChannel channel(1 << 20, 1 << 20, [] {});
    auto [stream, guest] = socket_pair();
    std::thread relay([&, s = std::move(stream)]() mutable { relay_tcp(channel, std::move(s), {}, "req_3"); });
    REQUIRE(channel.push(http::WsMessage{true, R"({"type":"signal","signal":"TERM"})"}));
    Sent sent = drain(channel);
    relay.join();
    REQUIRE(sent.close);
    CHECK(sent.close->code == http::ws_close::kUnsupportedData);
    REQUIRE_FALSE(sent.messages.empty());
    CHECK(sent.messages.front().data.find(R"("type":"error")") != std::string::npos);
}

TEST_CASE("relay_tcp plain (the desktop's noVNC): binary only, the guest's end closes with 1000") {
    http::WsChannel channel(1 << 20, 1 << 20, [] {});
    auto [stream, guest] = socket_pair();
    std::thread relay([&, s = std::move(stream)]() mutable {
        relay_tcp(channel, std::move(s), {'R', 'F', 'B'}, "req_4", TcpFraming{.eof_messages = false});
    });
    REQUIRE(channel.push(http::WsMessage{false, "to the "}));
    REQUIRE(channel.push(http::WsMessage{false, "guest"}));
    std::string got(12, '\0');
    std::size_t have = 0;
    while (have < got.size()) {
        ssize_t n = ::read(guest.get(), got.data() + have, got.size() - have);
        REQUIRE(n > 0);
        have += static_cast<std::size_t>(n);
    }
    CHECK(got == "to the guest");
    const std::string screen(150000, 's');
    REQUIRE(write_all(guest.get(), screen.data(), screen.size()).has_value());
    guest.reset();  // the VNC server ends
    Sent sent = drain(channel);
    relay.join();
    REQUIRE(sent.close);
    CHECK(sent.close->code == http::ws_close::kNormal);
    std::string back;
    for (const auto& message : sent.messages) {
        CHECK_FALSE(message.text);  // no {"type":"eof"}: noVNC takes every message as RFB bytes
        back += message.data;
    }
    CHECK(back == "RFB" + screen);
}

TEST_CASE("relay_tcp plain: a text message closes with 1003, without an error message") {
    http::WsChannel channel(1 << 20, 1 << 20, [] {});
    auto [stream, guest] = socket_pair();
    std::thread relay([&, s = std::move(stream)]() mutable {
        relay_tcp(channel, std::move(s), {}, "req_5", TcpFraming{.eof_messages = false});
    });
    REQUIRE(channel.push(http::WsMessage{true, R"({"type":"eof"})"}));
    Sent sent = drain(channel);
    relay.join();
    REQUIRE(sent.close);
    CHECK(sent.close->code == http::ws_close::kUnsupportedData);
    CHECK(sent.messages.empty());
    CHECK(read_to_end(guest.get()).empty());
}

TEST_CASE("relay_tcp with a client filter: its bytes reach the guest, its refusal closes with 1008") {
    http::WsChannel channel(1 << 20, 1 << 20, [] {});
    auto [stream, guest] = socket_pair();
    TcpFraming framing{.eof_messages = false};
    framing.client_filter = [](std::string_view in, std::string& out) -> Result<void> {
        if (in == "bad") {
            return make_coded_error("rfb_refused", "a stream it cannot parse");
        }
        for (char c : in) {
            if (c != 'x') {
                out.push_back(c);  // drops every 'x'
            }
        }
        return ok();
    };
    std::thread relay([&, s = std::move(stream)]() mutable {
        relay_tcp(channel, std::move(s), {}, "req_6", framing);
    });
    REQUIRE(channel.push(http::WsMessage{false, "axbxc"}));
    REQUIRE(channel.push(http::WsMessage{false, "bad"}));
    Sent sent = drain(channel);
    relay.join();
    REQUIRE(sent.close);
    CHECK(sent.close->code == http::ws_close::kPolicyViolation);
    CHECK(sent.close->reason == "a stream it cannot parse");
    CHECK(read_to_end(guest.get()) == "abc");
}

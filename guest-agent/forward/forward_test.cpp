// connect_tcp and listen_tcp against the real agent (socket pairs) and
// real TCP on 127.0.0.1: bytes both ways, bytes pipelined behind the
// request, large transfers, half-closes, failures, hostile requests, and
// many connections at once.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <future>
#include <optional>

#include "guest-agent/forward/forward_client.hpp"
#include "guest-agent/forward/forward_test_util.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

constexpr std::uint64_t kLarge = 48ull << 20;

GuestStream open(AgentHarness& h, std::uint16_t port) {
    auto stream = open_tcp(h.connect(), "127.0.0.1", port);
    REQUIRE_MESSAGE(stream, (stream ? "" : stream.error().to_string()));
    return std::move(*stream);
}

// Waits (a bounded time) until the agent serves no session.
bool sessions_drop_to(AgentHarness& h, std::size_t count) {
    for (int i = 0; i < 500; ++i) {
        if (h.agent->active_sessions() == count) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

}  // namespace

TEST_CASE("connect_tcp carries bytes both ways") {
    AgentHarness h;
    auto server = TestServer::tcp(echo);
    auto stream = open(h, server->port());
    CHECK(stream.received.empty());
    send_all(stream.fd.get(), "hello, guest");
    CHECK(read_exact(stream.fd.get(), 12) == "hello, guest");
    send_all(stream.fd.get(), "again");
    ::shutdown(stream.fd.get(), SHUT_WR);
    CHECK(read_to_eof(stream.fd.get()) == "again");
}

TEST_CASE("bytes sent right behind the request are not lost") {
    AgentHarness h;
    auto server = TestServer::tcp(echo);
    auto client = h.connect();
    REQUIRE(client.send_request("connect_tcp", Json{{"port", server->port()}}));
    // Pipelined: on the wire before the agent has even connected.
    const std::string early = "early bytes";
    send_all(client.stream().fd(), early);
    auto reply = client.read_reply();
    REQUIRE(reply);
    CHECK((*reply)["connected"] == true);
    auto buffered = client.stream().take_buffered();
    std::string echoed(buffered.begin(), buffered.end());
    echoed += read_exact(client.stream().fd(), early.size() - echoed.size());
    CHECK(echoed == early);
}

TEST_CASE("a server that speaks first: its bytes may arrive with the reply") {
    AgentHarness h;
    auto server = TestServer::tcp([](UniqueFd c) { send_all(c.get(), "220 banner\r\n"); });
    auto stream = open(h, server->port());
    std::string banner(stream.received.begin(), stream.received.end());
    banner += read_to_eof(stream.fd.get());
    CHECK(banner == "220 banner\r\n");
}

TEST_CASE("a large transfer each way arrives whole") {
    AgentHarness h;
    SUBCASE("client to guest server") {
        std::atomic<std::uint64_t> server_hash{0}, server_bytes{0};
        auto server = TestServer::tcp([&](UniqueFd c) {
            auto got = receive_hashed(c.get());
            server_bytes = got.bytes;
            server_hash = got.hash;
            send_all(c.get(), "done");
        });
        auto stream = open(h, server->port());
        const auto sent = send_pattern(stream.fd.get(), kLarge);
        ::shutdown(stream.fd.get(), SHUT_WR);
        CHECK(read_to_eof(stream.fd.get()) == "done");
        CHECK(server_bytes == kLarge);
        CHECK(server_hash == sent);
    }
    SUBCASE("guest server to client") {
        std::atomic<std::uint64_t> sent{0};
        auto server = TestServer::tcp([&](UniqueFd c) { sent = send_pattern(c.get(), kLarge); });
        auto stream = open(h, server->port());
        auto got = receive_hashed(stream.fd.get(), stream.received);
        CHECK(got.bytes == kLarge);
        CHECK(got.hash == sent);
    }
}

TEST_CASE("half-closes are passed on in each direction") {
    AgentHarness h;
    SUBCASE("the client finishes first, then reads the answer") {
        auto server = TestServer::tcp([](UniqueFd c) {
            std::string request = read_to_eof(c.get());  // needs the client's half-close
            send_all(c.get(), "got " + request);
        });
        auto stream = open(h, server->port());
        send_all(stream.fd.get(), "question");
        ::shutdown(stream.fd.get(), SHUT_WR);
        CHECK(read_to_eof(stream.fd.get()) == "got question");
    }
    SUBCASE("the server finishes first, then reads the client") {
        std::promise<std::string> heard;
        auto server = TestServer::tcp([&](UniqueFd c) {
            send_all(c.get(), "speak");
            ::shutdown(c.get(), SHUT_WR);
            heard.set_value(read_to_eof(c.get()));
        });
        auto stream = open(h, server->port());
        std::string prompt(stream.received.begin(), stream.received.end());
        prompt += read_to_eof(stream.fd.get());  // the server's half-close arrives as EOF
        CHECK(prompt == "speak");
        send_all(stream.fd.get(), "words after the server's EOF");
        ::shutdown(stream.fd.get(), SHUT_WR);
        auto future = heard.get_future();
        REQUIRE(future.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
        CHECK(future.get() == "words after the server's EOF");
    }
}

TEST_CASE("a closed port gives connect_failed and the session goes on") {
    AgentHarness h;
    std::uint16_t closed_port = 0;
    {
        auto server = TestServer::tcp(echo);
        closed_port = server->port();
    }
    auto client = h.connect();
    auto reply = client.call("connect_tcp", Json{{"host", "localhost"}, {"port", closed_port}});
    REQUIRE_FALSE(reply);
    CHECK(error_code(reply.error()) == "connect_failed");
    CHECK(reply.error().message.find(fmt::format("127.0.0.1:{}", closed_port)) != std::string::npos);
    CHECK(reply.error().message.find("refused") != std::string::npos);
    CHECK(client.health());
    // ... and can still become a forward.
    auto server = TestServer::tcp(echo);
    auto stream = open_tcp(std::move(client), "127.0.0.1", server->port());
    REQUIRE(stream);
    send_all(stream->fd.get(), "x");
    CHECK(read_exact(stream->fd.get(), 1) == "x");
}

TEST_CASE("bad connect_tcp and listen_tcp requests are refused and the session goes on") {
    AgentHarness h;
    auto client = h.connect();
    const Json bad_connects[] = {
        Json::object(),                                // no port
        {{"port", "80"}},                              // wrong type
        {{"port", 0}},                                 // not connectable
        {{"port", 70000}},                             // out of range
        {{"port", -1}},                                //
        {{"port", 80}, {"host", "example.com"}},       // names are not resolved
        {{"port", 80}, {"host", 12}},                  //
        {{"port", 80}, {"host", std::string("127.0.0.1\0x", 11)}},
        {{"port", 80}, {"host", std::string(60000, 'a')}},
    };
    for (const auto& fields : bad_connects) {
        auto reply = client.call("connect_tcp", fields);
        REQUIRE_FALSE(reply);
        CHECK_MESSAGE(error_code(reply.error()) == "bad_request", fields.dump());
    }
    const Json bad_listens[] = {
        {{"port", 0}},                                  // no host_port
        {{"port", 0}, {"host_port", 0}},
        {{"port", 0}, {"host_port", 4294967295ll}},
        {{"port", 0}, {"host_port", "1"}},
        {{"port", 65536}, {"host_port", 1}},
        {{"port", 0}, {"host_port", 1}, {"host", "::g"}},
    };
    for (const auto& fields : bad_listens) {
        auto reply = client.call("listen_tcp", fields);
        REQUIRE_FALSE(reply);
        CHECK_MESSAGE(error_code(reply.error()) == "bad_request", fields.dump());
    }
    CHECK(client.health());
}

TEST_CASE("connect_tcp over IPv6 loopback") {
    AgentHarness h;
    auto address = parse_tcp_address("::1", 0);
    REQUIRE(address);
    auto listener = listen_tcp(*address);
    if (!listener) {
        MESSAGE("no IPv6 loopback here: " << listener.error().to_string());
        return;
    }
    TestServer server(std::move(*listener), echo);
    auto stream = open_tcp(h.connect(), "::1", server.port());
    REQUIRE(stream);
    send_all(stream->fd.get(), "six");
    CHECK(read_exact(stream->fd.get(), 3) == "six");
}

TEST_CASE("a client vanishing mid-transfer ends its session only") {
    AgentHarness h;
    auto other = h.connect();
    auto server = TestServer::tcp([](UniqueFd c) { send_pattern(c.get(), kLarge); });
    {
        auto stream = open(h, server->port());
        CHECK(read_exact(stream.fd.get(), 1000).size() == 1000);
    }  // closed with most of the data unread
    CHECK(sessions_drop_to(h, 1));
    CHECK(other.health());
}

TEST_CASE("many forwarded connections at once") {
    AgentHarness h;
    auto server = TestServer::tcp(echo);
    constexpr int kConnections = 64;
    std::vector<GuestStream> streams;
    for (int i = 0; i < kConnections; ++i) {
        streams.push_back(open(h, server->port()));
    }
    std::vector<std::thread> clients;
    std::atomic<int> good{0};
    for (int i = 0; i < kConnections; ++i) {
        clients.emplace_back([&, i] {
            const std::string message = fmt::format("connection {} ", i);
            std::string expected;
            for (int round = 0; round < 20; ++round) {
                send_all(streams[i].fd.get(), message);
                expected += message;
            }
            ::shutdown(streams[i].fd.get(), SHUT_WR);
            if (read_to_eof(streams[i].fd.get()) == expected) {
                ++good;
            }
        });
    }
    for (auto& t : clients) {
        t.join();
    }
    CHECK(good == kConnections);
}

// --- listen_tcp -------------------------------------------------------------

namespace {

constexpr std::uint32_t kHostPort = 4000;

struct ReverseSetup {
    AgentHarness h;
    // The host service, where the agent's connect_host(kHostPort) arrives.
    std::unique_ptr<TestServer> host_service =
        TestServer::unix_socket(fmt::format("{}_{}", h.host_prefix(), kHostPort), echo);
};

std::uint16_t listen(AgentClient& control, std::uint16_t port = 0) {
    auto reply = control.call("listen_tcp", Json{{"port", port}, {"host_port", kHostPort}});
    REQUIRE_MESSAGE(reply, (reply ? "" : reply.error().to_string()));
    CHECK((*reply)["type"] == "result");
    return (*reply)["port"].get<std::uint16_t>();
}

// Connects to a guest port; false once nothing listens there.
bool refused(std::uint16_t port) {
    auto address = parse_tcp_address("127.0.0.1", port);
    auto fd = connect_tcp(*address, std::chrono::seconds(5));
    return !fd && fd.error().errno_value == ECONNREFUSED;
}

}  // namespace

TEST_CASE("listen_tcp makes a host service reachable from the guest") {
    ReverseSetup s;
    auto control = s.h.connect();
    const auto port = listen(control);
    CHECK(port != 0);
    auto guest = connect_local_tcp(port);
    send_all(guest.get(), "to the host and back");
    ::shutdown(guest.get(), SHUT_WR);
    CHECK(read_to_eof(guest.get()) == "to the host and back");
}

TEST_CASE("bytes sent on a listen_tcp connection after the result are ignored") {
    ReverseSetup s;
    auto control = s.h.connect();
    const auto port = listen(control);
    send_all(control.stream().fd(), "stray bytes, not even a frame");
    REQUIRE(control.send_request("health"));
    auto guest = connect_local_tcp(port);
    send_all(guest.get(), "still listening");
    ::shutdown(guest.get(), SHUT_WR);
    CHECK(read_to_eof(guest.get()) == "still listening");
}

TEST_CASE("closing the listen_tcp connection stops listening; joined connections go on") {
    ReverseSetup s;
    std::optional<AgentClient> control = s.h.connect();
    const auto port = listen(*control);
    auto joined = connect_local_tcp(port);
    send_all(joined.get(), "before");
    CHECK(read_exact(joined.get(), 6) == "before");
    control.reset();
    bool stopped = false;
    for (int i = 0; i < 500 && !stopped; ++i) {
        stopped = refused(port);
        if (!stopped) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    CHECK(stopped);
    send_all(joined.get(), "after");
    ::shutdown(joined.get(), SHUT_WR);
    CHECK(read_to_eof(joined.get()) == "after");
}

TEST_CASE("listen_tcp on a port in use is a clear error") {
    ReverseSetup s;
    auto taken = TestServer::tcp(echo);
    auto control = s.h.connect();
    auto reply = control.call("listen_tcp", Json{{"port", taken->port()}, {"host_port", kHostPort}});
    REQUIRE_FALSE(reply);
    CHECK(reply.error().message.find("Address already in use") != std::string::npos);
    CHECK(reply.error().message.find(fmt::format("127.0.0.1:{}", taken->port())) != std::string::npos);
    CHECK(control.health());
}

TEST_CASE("a guest connection with no host service behind it is closed") {
    AgentHarness h;  // nothing listens at <prefix>_4000
    auto control = h.connect();
    const auto port = listen(control);
    auto guest = connect_local_tcp(port);
    CHECK(read_to_eof(guest.get()).empty());
}

TEST_CASE("many guest connections through one listener at once") {
    ReverseSetup s;
    auto control = s.h.connect();
    const auto port = listen(control);
    constexpr int kConnections = 64;
    std::vector<UniqueFd> guests;
    for (int i = 0; i < kConnections; ++i) {
        guests.push_back(connect_local_tcp(port));
    }
    std::atomic<int> good{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < kConnections; ++i) {
        clients.emplace_back([&, i] {
            const std::string message = fmt::format("guest {} says hello", i);
            send_all(guests[i].get(), message);
            ::shutdown(guests[i].get(), SHUT_WR);
            if (read_to_eof(guests[i].get()) == message) {
                ++good;
            }
        });
    }
    for (auto& t : clients) {
        t.join();
    }
    CHECK(good == kConnections);
}

TEST_CASE("a large transfer through listen_tcp arrives whole") {
    AgentHarness h;
    std::atomic<std::uint64_t> host_hash{0}, host_bytes{0};
    auto host_service = TestServer::unix_socket(fmt::format("{}_{}", h.host_prefix(), kHostPort), [&](UniqueFd c) {
        auto got = receive_hashed(c.get());
        host_bytes = got.bytes;
        host_hash = got.hash;
        send_pattern(c.get(), kLarge);
    });
    auto control = h.connect();
    auto guest = connect_local_tcp(listen(control));
    const auto sent = send_pattern(guest.get(), kLarge);
    ::shutdown(guest.get(), SHUT_WR);
    auto back = receive_hashed(guest.get());
    CHECK(host_bytes == kLarge);
    CHECK(host_hash == sent);
    CHECK(back.bytes == kLarge);
    CHECK(back.hash == sent);  // the same pattern both ways
}

TEST_CASE("the connection threads are bounded") {
    ConnectionThreads threads(2);
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    CHECK(threads.start([released] { released.wait(); }));
    CHECK(threads.start([released] { released.wait(); }));
    CHECK_FALSE(threads.start([] {}));
    CHECK(threads.running() == 2);
    release.set_value();
    threads.join_all();
    CHECK(threads.running() == 0);
    CHECK(threads.start([] {}));
}

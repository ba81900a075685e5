// The host-side forwarders end to end: host TCP clients through
// PortForwarder, a fake hybrid-vsock socket and the real agent to guest
// TCP servers; guest TCP clients through listen_tcp and ReverseForwarder
// to host TCP servers. Also measures forwarded throughput.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>

#include "guest-agent/forward/forward_client.hpp"
#include "guest-agent/forward/forward_test_util.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

// The agent behind a fake VMM socket at the harness's host prefix, so
// that "<uds>_<port>" is where the agent's connect_host() goes.
struct Vm {
    AgentHarness h;
    FakeHybridVsock vsock{*h.agent, h.host_prefix()};
    AgentEndpoint endpoint{.uds_path = h.host_prefix(), .token = std::string(kTestToken)};
};

double megabytes_per_second(std::uint64_t bytes, std::chrono::steady_clock::duration elapsed) {
    return static_cast<double>(bytes) / 1e6 / std::chrono::duration<double>(elapsed).count();
}

}  // namespace

TEST_CASE("open_tcp through the hybrid vsock socket") {
    Vm vm;
    auto server = TestServer::tcp(echo);
    auto stream = open_tcp(vm.endpoint, "127.0.0.1", server->port());
    REQUIRE_MESSAGE(stream, (stream ? "" : stream.error().to_string()));
    send_all(stream->fd.get(), "through the vmm");
    ::shutdown(stream->fd.get(), SHUT_WR);
    CHECK(read_to_eof(stream->fd.get()) == "through the vmm");

    auto refused = open_tcp(vm.endpoint, "127.0.0.1", 1);
    REQUIRE_FALSE(refused);
    CHECK(error_code(refused.error()) == "connect_failed");
}

TEST_CASE("PortForwarder forwards host connections to a guest port") {
    Vm vm;
    auto server = TestServer::tcp(echo);
    auto forwarder = PortForwarder::start(vm.endpoint, "127.0.0.1", 0, "127.0.0.1", server->port());
    REQUIRE_MESSAGE(forwarder, (forwarder ? "" : forwarder.error().to_string()));
    CHECK(forwarder->local_port() != 0);
    CHECK(forwarder->local_port() != server->port());

    SUBCASE("one connection, half-closed") {
        auto client = connect_local_tcp(forwarder->local_port());
        send_all(client.get(), "hello through the forward");
        ::shutdown(client.get(), SHUT_WR);
        CHECK(read_to_eof(client.get()) == "hello through the forward");
    }
    SUBCASE("many at once") {
        constexpr int kConnections = 50;
        std::atomic<int> good{0};
        std::vector<std::thread> clients;
        for (int i = 0; i < kConnections; ++i) {
            clients.emplace_back([&, i] {
                auto client = connect_local_tcp(forwarder->local_port());
                const std::string message = fmt::format("client {}", i);
                send_all(client.get(), message);
                ::shutdown(client.get(), SHUT_WR);
                if (read_to_eof(client.get()) == message) {
                    ++good;
                }
            });
        }
        for (auto& t : clients) {
            t.join();
        }
        CHECK(good == kConnections);
    }
    SUBCASE("stop ends the listener and open connections") {
        auto client = connect_local_tcp(forwarder->local_port());
        send_all(client.get(), "ping");
        CHECK(read_exact(client.get(), 4) == "ping");
        const auto port = forwarder->local_port();
        forwarder->stop();
        CHECK(read_to_eof(client.get()).empty());
        auto address = parse_tcp_address("127.0.0.1", port);
        auto again = connect_tcp(*address, std::chrono::seconds(1));
        REQUIRE_FALSE(again);
        CHECK(again.error().errno_value == ECONNREFUSED);
    }
}

TEST_CASE("PortForwarder to a closed guest port resets the host connection") {
    Vm vm;
    auto forwarder = PortForwarder::start(vm.endpoint, "127.0.0.1", 0, "127.0.0.1", 1);
    REQUIRE(forwarder);
    auto client = connect_local_tcp(forwarder->local_port());
    char c = 0;
    CHECK(::recv(client.get(), &c, 1, 0) < 0);
    CHECK(errno == ECONNRESET);
}

TEST_CASE("PortForwarder refuses addresses it cannot use") {
    AgentEndpoint endpoint{.uds_path = "/nonexistent", .token = "x"};
    auto bad_listen = PortForwarder::start(endpoint, "not-an-address", 0, "127.0.0.1", 80);
    CHECK_FALSE(bad_listen);
    auto bad_guest = PortForwarder::start(endpoint, "127.0.0.1", 0, "guest.example", 80);
    CHECK_FALSE(bad_guest);
}

TEST_CASE("ReverseForwarder makes a host TCP service reachable in the guest") {
    Vm vm;
    auto host_service = TestServer::tcp(echo);
    auto reverse = ReverseForwarder::start(vm.endpoint, "127.0.0.1", 0, 5000, "127.0.0.1", host_service->port());
    REQUIRE_MESSAGE(reverse, (reverse ? "" : reverse.error().to_string()));
    CHECK(reverse->guest_port() != 0);

    auto guest = connect_local_tcp(reverse->guest_port());
    send_all(guest.get(), "from the guest");
    ::shutdown(guest.get(), SHUT_WR);
    CHECK(read_to_eof(guest.get()) == "from the guest");

    const auto port = reverse->guest_port();
    reverse->stop();
    bool refused = false;
    for (int i = 0; i < 500 && !refused; ++i) {
        auto address = parse_tcp_address("127.0.0.1", port);
        auto fd = connect_tcp(*address, std::chrono::seconds(1));
        refused = !fd && fd.error().errno_value == ECONNREFUSED;
        if (!refused) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    CHECK(refused);
}

TEST_CASE("ReverseForwarder reports a guest port in use") {
    Vm vm;
    auto taken = TestServer::tcp(echo);
    auto reverse = ReverseForwarder::start(vm.endpoint, "127.0.0.1", taken->port(), 5001, "127.0.0.1", 80);
    REQUIRE_FALSE(reverse);
    CHECK(reverse.error().message.find("Address already in use") != std::string::npos);
}

namespace {

constexpr std::uint64_t kThroughputBytes = 512ull << 20;

// Sends kThroughputBytes of zeros (correctness is checked by the hashed
// transfers; here only the pumps should cost).
void send_zeros(int fd) {
    static const std::vector<char> zeros(256 * 1024);
    for (std::uint64_t sent = 0; sent < kThroughputBytes;) {
        ssize_t n = ::send(fd, zeros.data(), std::min<std::uint64_t>(zeros.size(), kThroughputBytes - sent), MSG_NOSIGNAL);
        if (n <= 0) {
            return;
        }
        sent += static_cast<std::uint64_t>(n);
    }
}

std::uint64_t count_to_eof(int fd) {
    std::vector<char> buffer(256 * 1024);
    std::uint64_t total = 0;
    while (true) {
        ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n <= 0) {
            return total;
        }
        total += static_cast<std::uint64_t>(n);
    }
}

struct Throughput {
    double upload = 0;    // client -> server
    double download = 0;  // server -> client
};

// Upload and download through whatever `connect(server_port)` reaches.
template <typename Connect>
Throughput measure(Connect connect) {
    std::atomic<std::uint64_t> sunk{0};
    auto sink = TestServer::tcp([&](UniqueFd c) {
        sunk = count_to_eof(c.get());
        send_all(c.get(), "k");
    });
    auto source = TestServer::tcp([](UniqueFd c) { send_zeros(c.get()); });
    Throughput result;
    auto start = std::chrono::steady_clock::now();
    {
        UniqueFd up = connect(sink->port());
        send_zeros(up.get());
        ::shutdown(up.get(), SHUT_WR);
        CHECK(read_to_eof(up.get()) == "k");
    }
    result.upload = megabytes_per_second(sunk, std::chrono::steady_clock::now() - start);
    CHECK(sunk == kThroughputBytes);
    start = std::chrono::steady_clock::now();
    std::uint64_t got = 0;
    {
        UniqueFd down = connect(source->port());
        got = count_to_eof(down.get());
    }
    result.download = megabytes_per_second(got, std::chrono::steady_clock::now() - start);
    CHECK(got == kThroughputBytes);
    return result;
}

}  // namespace

TEST_CASE("forwarded throughput") {
    Vm vm;
    auto direct = measure([](std::uint16_t port) { return connect_local_tcp(port); });
    std::vector<PortForwarder> forwarders;
    auto forwarded = measure([&](std::uint16_t port) {
        auto forwarder = PortForwarder::start(vm.endpoint, "127.0.0.1", 0, "127.0.0.1", port);
        REQUIRE(forwarder);
        auto fd = connect_local_tcp(forwarder->local_port());
        forwarders.push_back(std::move(*forwarder));
        return fd;
    });
    MESSAGE(fmt::format("512 MiB each way. Direct loopback TCP: up {:.0f} MB/s, down {:.0f} MB/s. Through "
                        "PortForwarder + Unix socket + agent (two joins): up {:.0f} MB/s, down {:.0f} MB/s",
                        direct.upload, direct.download, forwarded.upload, forwarded.download));
}

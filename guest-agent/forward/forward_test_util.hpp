// For the port forwarding tests: TCP servers on 127.0.0.1 standing in for
// guest services, Unix listeners standing in for host services, a fake
// VMM hybrid-vsock socket in front of the test agent, and byte helpers.
#pragma once

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/event_fd.hpp"
#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/forward/connection_threads.hpp"
#include "guest-agent/forward/tcp_socket.hpp"

namespace sbx::agent::testing {

using Handler = std::function<void(UniqueFd)>;

// Serves each connection accepted on `listener` with `handler` on its own
// thread until destroyed (connections still open are waited for).
class TestServer {
public:
    TestServer(UniqueFd listener, Handler handler)
        : listener_(std::move(listener)), handler_(std::move(handler)), stop_(EventFd::create().value()) {
        thread_ = std::thread([this] {
            accept_connections(listener_.get(), stop_.fd(), -1, connections_, handler_);
        });
    }
    ~TestServer() {
        REQUIRE(stop_.signal());
        thread_.join();
        connections_.join_all();
    }
    TestServer(const TestServer&) = delete;
    TestServer& operator=(const TestServer&) = delete;

    // A TCP server on 127.0.0.1 with a free port.
    static std::unique_ptr<TestServer> tcp(Handler handler) {
        auto address = parse_tcp_address("127.0.0.1", 0);
        REQUIRE(address);
        auto listener = listen_tcp(*address);
        REQUIRE(listener);
        return std::make_unique<TestServer>(std::move(*listener), std::move(handler));
    }
    // A Unix server at `path`.
    static std::unique_ptr<TestServer> unix_socket(const std::string& path, Handler handler) {
        auto listener = listen_unix(path);
        REQUIRE_MESSAGE(listener, (listener ? "" : listener.error().to_string()));
        return std::make_unique<TestServer>(std::move(*listener), std::move(handler));
    }

    [[nodiscard]] std::uint16_t port() const { return *local_port(listener_.get()); }
    [[nodiscard]] int listener() const { return listener_.get(); }

private:
    UniqueFd listener_;
    Handler handler_;
    EventFd stop_;
    ConnectionThreads connections_{1024};
    std::thread thread_;
};

inline void send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        REQUIRE(n > 0);
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
}

// Reads until end of stream (or an error: what arrived so far).
inline std::string read_to_eof(int fd) {
    std::string out;
    char buffer[65536];
    while (true) {
        ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0) {
            return out;
        }
        out.append(buffer, static_cast<std::size_t>(n));
    }
}

// Reads exactly `size` bytes (fewer only at end of stream).
inline std::string read_exact(int fd, std::size_t size) {
    std::string out(size, '\0');
    std::size_t got = 0;
    while (got < size) {
        ssize_t n = ::recv(fd, out.data() + got, size - got, 0);
        if (n <= 0) {
            break;
        }
        got += static_cast<std::size_t>(n);
    }
    out.resize(got);
    return out;
}

// Echoes until end of stream, then half-closes.
inline void echo(UniqueFd connection) {
    char buffer[65536];
    while (true) {
        ssize_t n = ::recv(connection.get(), buffer, sizeof buffer, 0);
        if (n <= 0) {
            break;
        }
        if (::send(connection.get(), buffer, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) {
            return;
        }
    }
    ::shutdown(connection.get(), SHUT_WR);
}

inline UniqueFd connect_local_tcp(std::uint16_t port) {
    auto address = parse_tcp_address("127.0.0.1", port);
    REQUIRE(address);
    auto fd = connect_tcp(*address, std::chrono::seconds(5));
    REQUIRE_MESSAGE(fd, (fd ? "" : fd.error().to_string()));
    return std::move(*fd);
}

// FNV-1a over a deterministic byte sequence and over received bytes.
struct Fnv {
    std::uint64_t value = 14695981039346656037ull;
    void add(std::span<const std::uint8_t> bytes) {
        for (std::uint8_t b : bytes) {
            value = (value ^ b) * 1099511628211ull;
        }
    }
};
inline void pattern(std::uint64_t position, std::span<std::uint8_t> out) {
    for (std::uint8_t& b : out) {
        std::uint64_t x = position++ * 0x9E3779B97F4A7C15ull;
        b = static_cast<std::uint8_t>(x >> 56);
    }
}

// Writes `total` pattern bytes, returning their hash.
inline std::uint64_t send_pattern(int fd, std::uint64_t total) {
    std::vector<std::uint8_t> chunk(256 * 1024);
    Fnv hash;
    for (std::uint64_t sent = 0; sent < total;) {
        auto piece = std::span(chunk).first(static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), total - sent)));
        pattern(sent, piece);
        hash.add(piece);
        for (std::size_t off = 0; off < piece.size();) {
            ssize_t n = ::send(fd, piece.data() + off, piece.size() - off, MSG_NOSIGNAL);
            if (n <= 0) {
                return 0;
            }
            off += static_cast<std::size_t>(n);
        }
        sent += piece.size();
    }
    return hash.value;
}

struct Received {
    std::uint64_t bytes = 0;
    std::uint64_t hash = 0;
};
// Reads to end of stream, hashing.
inline Received receive_hashed(int fd, std::span<const std::uint8_t> first = {}) {
    std::vector<std::uint8_t> buffer(256 * 1024);
    Fnv hash;
    hash.add(first);
    Received r{first.size(), 0};
    while (true) {
        ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n <= 0) {
            break;
        }
        hash.add(std::span(buffer).first(static_cast<std::size_t>(n)));
        r.bytes += static_cast<std::uint64_t>(n);
    }
    r.hash = hash.value;
    return r;
}

// Stands in for the VMM's hybrid vsock socket at `path`: answers
// "CONNECT 52\n" with "OK 1\n" and hands the connection to the agent.
class FakeHybridVsock {
public:
    FakeHybridVsock(Agent& agent, const std::string& path)
        : server_(TestServer::unix_socket(path, [&agent](UniqueFd connection) {
              std::string line;
              char c = 0;
              while (line.size() < 64 && ::read(connection.get(), &c, 1) == 1 && c != '\n') {
                  line.push_back(c);
              }
              if (line != "CONNECT 52") {
                  return;
              }
              send_all(connection.get(), "OK 1\n");
              agent.serve(std::move(connection));
          })) {}

private:
    std::unique_ptr<TestServer> server_;
};

}  // namespace sbx::agent::testing

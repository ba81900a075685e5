// The Beast server over a real Unix socket with a raw client: slow
// handlers do not hold up other connections (they run on the worker
// pool), pipelined requests are answered in order, and protocol errors
// get the JSON error.
#include "host-tools/sbxd/http/server.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/post.hpp>

#include "base/unix_socket.hpp"

using namespace sbx;
using namespace sbx::sbxd;

namespace {

// A gate the slow handler waits at until the test opens it.
struct Gate {
    std::mutex mutex;
    std::condition_variable changed;
    bool open = false;
    bool waiting = false;
};

struct Running {
    std::string dir;
    std::string socket;
    boost::asio::io_context io;
    boost::asio::thread_pool workers{2};
    std::unique_ptr<http::Server> server;
    std::thread io_thread;
    Gate gate;

    Running() {
        std::string templ = (std::filesystem::temp_directory_path() / "sbxd-http-XXXXXX").string();
        REQUIRE(::mkdtemp(templ.data()) != nullptr);
        dir = templ;
        socket = dir + "/s.sock";
        http::ServerLimits limits;
        limits.max_body_bytes = 1000;
        limits.max_header_bytes = 2000;
        server = std::make_unique<http::Server>(
            io, workers, [this](http::Request r) { return handle(r); }, limits);
        auto bound = server->listen({http::Transport::Unix, socket, "", 0});
        REQUIRE_MESSAGE(bound.has_value(), (bound ? "" : bound.error().to_string()));
        io_thread = std::thread([this] { io.run(); });
    }
    ~Running() {
        {
            std::lock_guard lock(gate.mutex);
            gate.open = true;
        }
        gate.changed.notify_all();
        boost::asio::post(io, [this] {
            server->close();
            io.stop();
        });
        io_thread.join();
        workers.join();
        std::filesystem::remove_all(dir);
    }

    http::Response handle(const http::Request& request) {
        if (request.path == "/slow") {
            std::unique_lock lock(gate.mutex);
            gate.waiting = true;
            gate.changed.notify_all();
            gate.changed.wait(lock, [&] { return gate.open; });
        }
        return http::Response::ok({{"path", request.path}, {"body", request.body}}, request.request_id);
    }
};

UniqueFd connect(const std::string& path) {
    auto fd = connect_unix(path);
    REQUIRE(fd.has_value());
    timeval timeout{10, 0};
    ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    return std::move(*fd);
}

void send_all(const UniqueFd& fd, const std::string& data) {
    REQUIRE(write_all(fd.get(), data.data(), data.size()));
}

// Reads until `count` complete responses (by Content-Length) or EOF.
std::string read_responses(const UniqueFd& fd, int count) {
    std::string data;
    char buffer[4096];
    auto complete = [&] {
        std::size_t at = 0;
        for (int i = 0; i < count; ++i) {
            auto head_end = data.find("\r\n\r\n", at);
            if (head_end == std::string::npos) {
                return false;
            }
            auto cl = data.find("Content-Length: ", at);
            if (cl == std::string::npos || cl > head_end) {
                return false;
            }
            std::size_t length = std::stoul(data.substr(cl + 16));
            at = head_end + 4 + length;
            if (data.size() < at) {
                return false;
            }
        }
        return true;
    };
    while (!complete()) {
        ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
        if (n <= 0) {
            break;
        }
        data.append(buffer, static_cast<std::size_t>(n));
    }
    return data;
}

}  // namespace

TEST_CASE("a slow handler does not hold up another connection") {
    Running running;
    auto slow = connect(running.socket);
    send_all(slow, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    {
        std::unique_lock lock(running.gate.mutex);
        REQUIRE(running.gate.changed.wait_for(lock, std::chrono::seconds(10),
                                              [&] { return running.gate.waiting; }));
    }
    auto fast = connect(running.socket);
    send_all(fast, "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string reply = read_responses(fast, 1);
    CHECK(reply.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(reply.find(R"("path":"/fast")") != std::string::npos);
    {
        std::lock_guard lock(running.gate.mutex);
        CHECK_FALSE(running.gate.open);  // the slow one is still inside its handler
        running.gate.open = true;
    }
    running.gate.changed.notify_all();
    std::string slow_reply = read_responses(slow, 1);
    CHECK(slow_reply.find(R"("path":"/slow")") != std::string::npos);
}

TEST_CASE("pipelined requests on one connection are answered in order") {
    Running running;
    auto fd = connect(running.socket);
    send_all(fd,
             "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst"
             "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
             "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::string replies = read_responses(fd, 3);
    auto a = replies.find(R"("path":"/a")");
    auto b = replies.find(R"("path":"/b")");
    auto c = replies.find(R"("path":"/c")");
    REQUIRE(a != std::string::npos);
    REQUIRE(b != std::string::npos);
    REQUIRE(c != std::string::npos);
    CHECK(a < b);
    CHECK(b < c);
    CHECK(replies.find(R"("body":"first")") != std::string::npos);
    char extra = 0;
    CHECK(::read(fd.get(), &extra, 1) == 0);  // closed after Connection: close
}

TEST_CASE("protocol errors get the JSON error and close the connection") {
    Running running;
    struct Case {
        std::string request;
        std::string status_line;
        std::string code;
    };
    const Case cases[] = {
        {"NOT HTTP AT ALL\r\n\r\n", "HTTP/1.1 400 Bad Request", "bad_request"},
        {"GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(3000, 'a') + "\r\n\r\n",
         "HTTP/1.1 431 Request Header Fields Too Large", "headers_too_large"},
        {"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n", "HTTP/1.1 413 Payload Too Large",
         "payload_too_large"},
        {"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n" + std::string(1001, 'b') +
             "\r\n0\r\n\r\n",
         "HTTP/1.1 413 Payload Too Large", "payload_too_large"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.code);
        auto fd = connect(running.socket);
        send_all(fd, c.request);
        std::string reply = read_responses(fd, 1);
        CHECK(reply.rfind(c.status_line + "\r\n", 0) == 0);
        CHECK(reply.find(R"("code":")" + c.code + "\"") != std::string::npos);
        CHECK(reply.find("X-Request-Id: req_") != std::string::npos);
        char extra = 0;
        CHECK(::read(fd.get(), &extra, 1) == 0);
    }
    // Expect: 100-continue gets the interim response, then the real one.
    auto fd = connect(running.socket);
    send_all(fd, "POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
    char interim[64] = {};
    ssize_t n = ::read(fd.get(), interim, sizeof interim - 1);
    REQUIRE(n > 0);
    CHECK(std::string(interim, static_cast<std::size_t>(n)).rfind("HTTP/1.1 100 Continue\r\n", 0) == 0);
    send_all(fd, "hi");
    CHECK(read_responses(fd, 1).find(R"("body":"hi")") != std::string::npos);
}

TEST_CASE("listen addresses") {
    auto unix_address = http::parse_listen_address("unix:/run/x.sock");
    REQUIRE(unix_address.has_value());
    CHECK(unix_address->path == "/run/x.sock");
    auto tcp = http::parse_listen_address("tcp:127.0.0.1:8080");
    REQUIRE(tcp.has_value());
    CHECK(tcp->host == "127.0.0.1");
    CHECK(tcp->port == 8080);
    auto v6 = http::parse_listen_address("tcp:[::1]:0");
    REQUIRE(v6.has_value());
    CHECK(v6->host == "::1");
    for (const char* bad :
         {"unix:", "tcp:127.0.0.1", "tcp:127.0.0.1:65536", "tcp::80", "tcp:h:8x", "http://x", ""}) {
        CAPTURE(bad);
        CHECK_FALSE(http::parse_listen_address(bad).has_value());
    }
}

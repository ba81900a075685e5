// Streamed bodies over a real Unix socket with a raw client: a chunked
// response written as its producer goes, backpressure from a client that
// does not read, the producer told when the client leaves, and request
// bodies of any size read while they arrive.
#include "host-tools/sbxd/http/server.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include <boost/asio/post.hpp>

#include "base/unix_socket.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kStreamBuffer = 256 * 1024;

struct Running {
    std::string dir;
    std::string socket;
    boost::asio::io_context io;
    boost::asio::thread_pool workers{2};
    std::unique_ptr<http::Server> server;
    std::thread io_thread;

    std::atomic<std::uint64_t> produced{0};
    std::atomic<bool> producer_done{false};
    std::atomic<bool> hook_ran{false};
    std::mutex mutex;
    std::condition_variable changed;

    Running() {
        ::signal(SIGPIPE, SIG_IGN);  // a test client writing to a closed connection gets EPIPE
        std::string templ = (std::filesystem::temp_directory_path() / "sbxd-stream-XXXXXX").string();
        REQUIRE(::mkdtemp(templ.data()) != nullptr);
        dir = templ;
        socket = dir + "/s.sock";
        http::ServerLimits limits;
        limits.max_body_bytes = 1000;
        limits.stream_buffer_bytes = kStreamBuffer;
        server = std::make_unique<http::Server>(
            io, workers, [this](http::Request r) { return handle(std::move(r)); }, limits,
            [](const http::Request& r) { return r.path.rfind("/upload", 0) == 0; });
        auto bound = server->listen({http::Transport::Unix, socket, "", 0});
        REQUIRE_MESSAGE(bound.has_value(), (bound ? "" : bound.error().to_string()));
        io_thread = std::thread([this] { io.run(); });
    }
    ~Running() {
        boost::asio::post(io, [this] {
            server->close();
            io.stop();
        });
        io_thread.join();
        workers.join();
        server.reset();
        std::filesystem::remove_all(dir);
    }

    http::Response handle(http::Request request) {
        http::Response response;
        response.headers.emplace_back("Content-Type", "application/octet-stream");
        if (request.path == "/count") {
            // 1000 lines "0\n" .. "999\n", one chunk each.
            response.stream = [](http::BodyWriter& out) {
                for (int i = 0; i < 1000; ++i) {
                    if (!out.write(std::to_string(i) + "\n")) {
                        return;
                    }
                }
            };
        } else if (request.path == "/flood") {
            // 32 MiB as fast as it can.
            response.stream = [this](http::BodyWriter& out) {
                const std::string block(64 * 1024, 'x');
                for (int i = 0; i < 512; ++i) {
                    if (!out.write(block)) {
                        break;
                    }
                    produced += block.size();
                }
                producer_done = true;
            };
        } else if (request.path == "/silent") {
            // Writes nothing until the client leaves.
            response.stream = [this](http::BodyWriter& out) {
                auto hook = out.on_cancel([this] {
                    std::lock_guard lock(mutex);
                    hook_ran = true;
                    changed.notify_all();
                });
                std::unique_lock lock(mutex);
                changed.wait_for(lock, 30s, [this] { return hook_ran.load(); });
            };
        } else if (request.path == "/upload") {
            REQUIRE(request.body_stream);
            std::uint64_t total = 0, sum = 0;
            std::vector<std::uint8_t> buffer(100'000);
            while (true) {
                auto n = request.body_stream->read(buffer);
                if (!n) {
                    return http::Response::error(n.error(), request.request_id);
                }
                if (*n == 0) {
                    break;
                }
                for (std::size_t i = 0; i < *n; ++i) {
                    sum = sum * 31 + buffer[i];
                }
                total += *n;
            }
            return http::Response::ok({{"bytes", total}, {"sum", sum}}, request.request_id);
        } else if (request.path == "/upload-refused") {
            return http::Response::error(make_coded_error("not_found", "no such place"), request.request_id);
        } else {
            return http::Response::ok({{"path", request.path}}, request.request_id);
        }
        return response;
    }
};

UniqueFd connect(const std::string& path) {
    auto fd = connect_unix(path);
    REQUIRE(fd.has_value());
    timeval timeout{20, 0};
    ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    return std::move(*fd);
}

void send_all(const UniqueFd& fd, std::string_view data) {
    REQUIRE(write_all(fd.get(), data.data(), data.size()));
}

// A response, read from `fd` with what is left over in `pending`.
struct Reply {
    std::string head;
    std::string body;
};

bool fill(const UniqueFd& fd, std::string& pending) {
    char buffer[65536];
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n <= 0) {
        return false;
    }
    pending.append(buffer, static_cast<std::size_t>(n));
    return true;
}

// Reads one response: Content-Length or chunked (RFC 9112 §7.1).
Reply read_reply(const UniqueFd& fd, std::string& pending) {
    Reply reply;
    std::size_t end;
    while ((end = pending.find("\r\n\r\n")) == std::string::npos) {
        REQUIRE(fill(fd, pending));
    }
    reply.head = pending.substr(0, end + 4);
    pending.erase(0, end + 4);
    if (auto cl = reply.head.find("Content-Length: "); cl != std::string::npos) {
        std::size_t length = std::stoul(reply.head.substr(cl + 16));
        while (pending.size() < length) {
            REQUIRE(fill(fd, pending));
        }
        reply.body = pending.substr(0, length);
        pending.erase(0, length);
        return reply;
    }
    REQUIRE(reply.head.find("Transfer-Encoding: chunked") != std::string::npos);
    while (true) {
        std::size_t line;
        while ((line = pending.find("\r\n")) == std::string::npos) {
            REQUIRE(fill(fd, pending));
        }
        std::size_t size = std::stoul(pending.substr(0, line), nullptr, 16);
        while (pending.size() < line + 2 + size + 2) {
            REQUIRE(fill(fd, pending));
        }
        reply.body += pending.substr(line + 2, size);
        pending.erase(0, line + 2 + size + 2);
        if (size == 0) {
            return reply;
        }
    }
}

}  // namespace

TEST_CASE("a streamed response is chunked, and the connection is kept for the next request") {
    Running running;
    auto fd = connect(running.socket);
    std::string pending;
    send_all(fd, "GET /count HTTP/1.1\r\nHost: x\r\n\r\n");
    Reply reply = read_reply(fd, pending);
    CHECK(reply.head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(reply.head.find("Content-Type: application/octet-stream") != std::string::npos);
    CHECK(reply.head.find("X-Request-Id: req_") != std::string::npos);
    std::string want;
    for (int i = 0; i < 1000; ++i) {
        want += std::to_string(i) + "\n";
    }
    CHECK(reply.body == want);
    send_all(fd, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(read_reply(fd, pending).body.find(R"("path":"/after")") != std::string::npos);

    // HTTP/1.0 has no chunked coding: the body runs to the close.
    auto old = connect(running.socket);
    send_all(old, "GET /count HTTP/1.0\r\n\r\n");
    std::string all;
    while (fill(old, all)) {
    }
    auto body = all.find("\r\n\r\n");
    REQUIRE(body != std::string::npos);
    CHECK(all.find("chunked") == std::string::npos);
    CHECK(all.substr(body + 4) == want);
}

TEST_CASE("a client that does not read holds the producer back") {
    Running running;
    auto fd = connect(running.socket);
    int small = 64 * 1024;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    send_all(fd, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(1500ms);
    // The queue's limit plus what the two socket buffers hold.
    const std::uint64_t held = running.produced;
    CAPTURE(held);
    CHECK(held < 8u * 1024 * 1024);
    CHECK_FALSE(running.producer_done);
    std::string pending;
    Reply reply = read_reply(fd, pending);
    CHECK(reply.body.size() == 32u * 1024 * 1024);
    CHECK(running.producer_done);
}

TEST_CASE("a producer learns that its client left, even while it writes nothing") {
    Running running;
    {
        auto fd = connect(running.socket);
        send_all(fd, "GET /silent HTTP/1.1\r\nHost: x\r\n\r\n");
        std::string pending;
        while (pending.find("\r\n\r\n") == std::string::npos) {
            REQUIRE(fill(fd, pending));
        }
        CHECK_FALSE(running.hook_ran);
    }  // closed
    std::unique_lock lock(running.mutex);
    CHECK(running.changed.wait_for(lock, 10s, [&] { return running.hook_ran.load(); }));
}

TEST_CASE("a streamed request body of any size reaches the handler whole") {
    Running running;
    std::string data(9 * 1024 * 1024 + 17, '\0');
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < data.size(); ++i) {
        data[i] = static_cast<char>((i * 7919) >> 3);
        sum = sum * 31 + static_cast<std::uint8_t>(data[i]);
    }
    const std::string expect = fmt::format(R"("bytes":{},"requestId")", data.size());
    auto fd = connect(running.socket);
    std::string pending;
    // Over the 1000-byte JSON limit, with Content-Length; from a writer
    // thread, since the server reads only as fast as the handler takes it.
    std::thread writer([&] {
        send_all(fd, fmt::format("PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", data.size()));
        send_all(fd, data);
    });
    Reply reply = read_reply(fd, pending);
    writer.join();
    CHECK(reply.head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(reply.body.find(fmt::format(R"("bytes":{})", data.size())) != std::string::npos);
    CHECK(reply.body.find(fmt::format(R"("sum":{})", sum)) != std::string::npos);

    // Chunked, on the same connection.
    std::thread chunked([&] {
        send_all(fd, "PUT /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
        for (std::size_t at = 0; at < data.size(); at += 1 << 20) {
            std::string_view piece = std::string_view(data).substr(at, 1 << 20);
            send_all(fd, fmt::format("{:x}\r\n", piece.size()));
            send_all(fd, piece);
            send_all(fd, "\r\n");
        }
        send_all(fd, "0\r\n\r\n");
    });
    reply = read_reply(fd, pending);
    chunked.join();
    CHECK(reply.body.find(fmt::format(R"("bytes":{})", data.size())) != std::string::npos);
    CHECK(reply.body.find(fmt::format(R"("sum":{})", sum)) != std::string::npos);

    // A handler that answers without reading: the answer, then the close.
    auto refused = connect(running.socket);
    send_all(refused, "PUT /upload-refused HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc");
    std::string rest;
    reply = read_reply(refused, rest);
    CHECK(reply.head.rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);
    CHECK(reply.head.find("Connection: close") != std::string::npos);
}

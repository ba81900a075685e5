#include "guest-agent/client/agent_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "base/unix_socket.hpp"

namespace sbx::agent {
namespace {

constexpr std::size_t kMaxOkLine = 64;

void set_receive_timeout(int fd, std::chrono::milliseconds timeout) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

}  // namespace

std::string_view error_code(const Error& error) {
    std::string_view m = error.message;
    auto colon = m.find(':');
    return colon == std::string_view::npos ? std::string_view() : m.substr(0, colon);
}

Result<UniqueFd> connect_hybrid_vsock(const std::string& uds_path, std::uint32_t port,
                                      std::chrono::milliseconds timeout) {
    auto fd = connect_unix(uds_path);
    if (!fd) {
        return fd.error();
    }
    set_receive_timeout(fd->get(), timeout);
    const std::string line = fmt::format("CONNECT {}\n", port);
    if (::send(fd->get(), line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
        return sys_error("sending CONNECT to {}", uds_path);
    }
    // Byte by byte: whatever follows the line belongs to the stream.
    std::string reply;
    while (reply.size() < kMaxOkLine) {
        char c = 0;
        ssize_t n = ::read(fd->get(), &c, 1);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return n == 0 ? make_error("{}: vsock port {} refused the connection (nothing listening in the guest?)",
                                       uds_path, port)
                          : sys_error("{}: waiting for OK", uds_path);
        }
        if (c == '\n') {
            break;
        }
        reply.push_back(c);
    }
    if (!reply.starts_with("OK ")) {
        return make_error("{}: unexpected answer to CONNECT: \"{}\"", uds_path, reply);
    }
    set_receive_timeout(fd->get(), std::chrono::milliseconds(0));
    return fd;
}

Result<AgentClient> AgentClient::connect(const AgentEndpoint& endpoint) {
    auto fd = connect_hybrid_vsock(endpoint.uds_path, endpoint.port, endpoint.timeout);
    if (!fd) {
        return fd.error();
    }
    return handshake(std::move(*fd), endpoint.token, endpoint.timeout);
}

Result<AgentClient> AgentClient::handshake(UniqueFd fd, std::string_view token, std::chrono::milliseconds timeout) {
    const int raw = fd.get();
    set_receive_timeout(raw, timeout);
    auto stream = std::make_unique<FrameStream>(std::move(fd));
    if (auto r = stream->write_message(Json{{"type", "hello"}, {"version", kProtocolVersion}, {"token", token}}); !r) {
        return r.error();
    }
    auto hello = stream->read_message();
    if (!hello) {
        return hello.error().context("agent hello");
    }
    if ((*hello)["type"] == "error") {
        return make_error("{}: {}", hello->value("code", ""), hello->value("message", ""));
    }
    if ((*hello)["type"] != "hello") {
        return make_error("agent answered the hello with \"{}\"", hello->value("type", ""));
    }
    set_receive_timeout(raw, std::chrono::milliseconds(0));
    return AgentClient(std::move(stream), std::move(*hello));
}

Result<void> AgentClient::send_request(std::string_view op, Json fields) {
    fields["type"] = "request";
    fields["op"] = op;
    return stream_->write_message(fields);
}

Result<Json> AgentClient::read_reply() {
    auto reply = stream_->read_message();
    if (!reply) {
        return reply.error();
    }
    if ((*reply)["type"] == "error") {
        return make_error("{}: {}", reply->value("code", ""), reply->value("message", ""));
    }
    return reply;
}

Result<Json> AgentClient::call(std::string_view op, Json fields) {
    if (auto r = send_request(op, std::move(fields)); !r) {
        return r.error();
    }
    return read_reply();
}

Result<ReadyListener> ReadyListener::listen(const std::string& uds_path) {
    const std::string path = fmt::format("{}_{}", uds_path, kReadyPort);
    auto fd = listen_unix(path, Blocking::Yes, 4);
    if (!fd) {
        return fd.error().context("the agent's ready listener");
    }
    return ReadyListener(std::move(*fd), path);
}

ReadyListener::~ReadyListener() {
    if (fd_) {
        ::unlink(path_.c_str());
    }
}

Result<Json> ReadyListener::wait(std::chrono::milliseconds timeout) {
    pollfd p{fd_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (n == 0) {
        return make_error("the agent did not announce itself within {} ms", timeout.count());
    }
    if (n < 0) {
        return sys_error("waiting for the agent");
    }
    int conn = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
        return sys_error("accepting the agent's announcement");
    }
    UniqueFd c(conn);
    set_receive_timeout(c.get(), timeout);
    FrameStream stream(std::move(c));
    auto ready = stream.read_message();
    if (!ready) {
        return ready.error().context("agent announcement");
    }
    if ((*ready)["type"] != "ready") {
        return make_error("agent announcement of type \"{}\"", ready->value("type", ""));
    }
    return ready;
}

}  // namespace sbx::agent

#include "guest-agent/client/agent_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "base/unix_socket.hpp"

namespace sbx::agent {
namespace {

constexpr std::size_t kMaxOkLine = 64;

void set_socket_timeout(int fd, int option, std::chrono::milliseconds timeout) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

void set_receive_timeout(int fd, std::chrono::milliseconds timeout) { set_socket_timeout(fd, SO_RCVTIMEO, timeout); }

}  // namespace

bool is_timeout(const Error& error) { return error.errno_value == ETIMEDOUT; }

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
    return handshake(std::move(*fd), endpoint.token, endpoint.timeout, endpoint.reply_timeout);
}

Result<AgentClient> AgentClient::handshake(UniqueFd fd, std::string_view token, std::chrono::milliseconds timeout,
                                           std::chrono::milliseconds reply_timeout) {
    const int raw = fd.get();
    set_receive_timeout(raw, timeout);
    auto stream = std::make_unique<FrameStream>(std::move(fd));
    if (auto r = stream->write_message(Json{{"type", "hello"}, {"version", kProtocolVersion}, {"token", token}}); !r) {
        return r.error();
    }
    auto hello = stream->read_message();
    if (!hello) {
        if (hello.error().errno_value == EAGAIN || hello.error().errno_value == EWOULDBLOCK) {
            return errno_error(fmt::format("agent hello: no answer within {} ms", timeout.count()), ETIMEDOUT);
        }
        return hello.error().context("agent hello");
    }
    const std::string type = reply_type(*hello);
    if (type == "error") {
        return agent_error(*hello);
    }
    if (type != "hello") {
        return make_error("agent answered the hello with \"{}\"", printable(type, 64));
    }
    // V = min(ours, the agent's) (docs/agent-protocol.md, "Session").
    if (auto version = reply_u64(*hello, "version", kProtocolVersion); !version || *version == 0) {
        return make_error("agent hello: {}", version ? "version 0" : version.error().message);
    }
    for (std::string_view key : {"agent", "boot_id"}) {
        if (auto s = reply_optional_string(*hello, key); !s) {
            return s.error().context("agent hello");
        }
    }
    AgentClient client(std::move(stream), std::move(*hello), reply_timeout);
    client.set_reply_timeout(reply_timeout);
    return client;
}

void AgentClient::set_reply_timeout(std::chrono::milliseconds timeout) {
    reply_timeout_ = std::max(timeout, std::chrono::milliseconds(0));
    // Bounds the gaps inside a frame (FrameStream's reads); the wait for a
    // frame to begin is read_frame()'s poll.
    set_receive_timeout(stream_->fd(), reply_timeout_);
}

void AgentClient::set_send_timeout(std::chrono::milliseconds timeout) {
    set_socket_timeout(stream_->fd(), SO_SNDTIMEO, std::max(timeout, std::chrono::milliseconds(0)));
}

std::optional<Clock::time_point> AgentClient::reply_deadline() const {
    if (reply_timeout_.count() == 0) {
        return std::nullopt;
    }
    return Clock::now() + reply_timeout_;
}

void AgentClient::abandon() {
    if (!abandoned_) {
        abandoned_ = true;
        ::shutdown(stream_->fd(), SHUT_RDWR);
    }
}

Error AgentClient::abandon(Error error) {
    abandon();
    return error;
}

Result<Json> AgentClient::reply_of(const Frame& frame) {
    auto message = parse_message(frame.json);
    if (!message) {
        return abandon(malformed_reply(message.error().message));
    }
    if (reply_type(*message) == "error") {
        return agent_error(*message);
    }
    return message;
}

Result<Json> AgentClient::expect(Result<Json> reply, std::string_view type) {
    if (!reply) {
        return reply;
    }
    if (const std::string got = reply_type(*reply); got != type) {
        return abandon(
            malformed_reply(fmt::format("expected a \"{}\" message, got \"{}\"", type, printable(got, 64))));
    }
    return reply;
}

Result<Frame> AgentClient::read_frame(std::optional<Clock::time_point> deadline) {
    if (abandoned_) {
        return make_error("the connection to the agent was abandoned after an earlier failure");
    }
    if (!stream_->has_buffered_input()) {
        while (true) {
            int wait_ms = -1;
            if (deadline) {
                auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
                wait_ms = static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
            }
            pollfd p{stream_->fd(), POLLIN, 0};
            const int n = ::poll(&p, 1, wait_ms);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                return abandon(sys_error("waiting for the agent"));
            }
            if (n == 0) {
                return abandon(errno_error(
                    fmt::format("no reply from the agent within {} ms (the reply timeout)", reply_timeout_.count()),
                    ETIMEDOUT));
            }
            break;
        }
    }
    auto frame = stream_->read();
    if (!frame) {
        const int err = frame.error().errno_value;
        if (err == EAGAIN || err == EWOULDBLOCK) {
            return abandon(errno_error(fmt::format("the agent stopped for over {} ms inside a frame (the reply timeout)",
                                                   reply_timeout_.count()),
                                       ETIMEDOUT));
        }
        return abandon(frame.error());  // closed, or framing lost
    }
    return frame;
}

Result<Json> AgentClient::read_message(std::optional<Clock::time_point> deadline) {
    auto frame = read_frame(deadline);
    if (!frame) {
        return frame.error();
    }
    if (frame->kind != FrameKind::Json) {
        return abandon(malformed_reply("a data frame where a message was expected"));
    }
    auto message = parse_message(frame->json);
    if (!message) {
        return abandon(malformed_reply(message.error().message));
    }
    return message;
}

Result<void> AgentClient::send_request(std::string_view op, Json fields) {
    if (abandoned_) {
        return make_error("the connection to the agent was abandoned after an earlier failure");
    }
    fields["type"] = "request";
    fields["op"] = op;
    return stream_->write_message(fields);
}

Result<Json> AgentClient::read_reply(std::optional<Clock::time_point> deadline) {
    auto reply = read_message(deadline);
    if (!reply) {
        return reply.error();
    }
    if (reply_type(*reply) == "error") {
        return agent_error(*reply);
    }
    return reply;
}

Result<Json> AgentClient::read_reply() { return read_reply(reply_deadline()); }

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
    if (reply_type(*ready) != "ready") {
        return make_error("agent announcement of type \"{}\"", printable(reply_type(*ready), 64));
    }
    return ready;
}

}  // namespace sbx::agent

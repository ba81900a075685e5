// The port forwarding ops (docs/agent-protocol.md, "Port forwarding"):
// connect_tcp turns its session into a raw byte stream joined to a guest
// TCP connection; listen_tcp holds a guest listener for as long as its
// session stays open and joins each accepted connection to a new
// connection to a host port.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "base/log.hpp"
#include "guest-agent/agent/agent.hpp"
#include "guest-agent/forward/connection_threads.hpp"
#include "guest-agent/forward/splice.hpp"
#include "guest-agent/forward/tcp_socket.hpp"

namespace sbx::agent {
namespace {

// A guest address that drops SYNs fails the request after this long
// rather than after the kernel's two minutes of retries.
constexpr std::chrono::seconds kConnectTimeout{30};
// Guest programs can open connections to a forwarded listener at will:
// each costs a thread and up to two splice buffers, so both are bounded.
constexpr std::size_t kMaxJoinedPerListener = 256;
constexpr std::size_t kMaxJoinedInAgent = 1024;

std::atomic<std::size_t> g_joined_in_agent{0};

// Holds one of the agent-wide joined-connection slots while it lives.
class JoinedSlot {
public:
    static std::optional<JoinedSlot> take() {
        if (g_joined_in_agent.fetch_add(1) >= kMaxJoinedInAgent) {
            g_joined_in_agent.fetch_sub(1);
            return std::nullopt;
        }
        return JoinedSlot();
    }
    JoinedSlot(JoinedSlot&& other) noexcept : held_(std::exchange(other.held_, false)) {}
    JoinedSlot& operator=(JoinedSlot&&) = delete;
    ~JoinedSlot() {
        if (held_) {
            g_joined_in_agent.fetch_sub(1);
        }
    }

private:
    JoinedSlot() = default;
    bool held_ = true;
};

Result<TcpAddress> requested_address(const Json& request, std::int64_t min_port) {
    auto host = get_string(request, "host", std::string("127.0.0.1"));
    if (!host) {
        return host.error();
    }
    auto port = get_int(request, "port");
    if (!port) {
        return port.error();
    }
    if (*port < min_port || *port > std::numeric_limits<std::uint16_t>::max()) {
        return make_error("\"port\" must be in {}..65535", min_port);
    }
    return parse_tcp_address(*host, static_cast<std::uint16_t>(*port));
}

Result<void> send_error(Session& session, std::string_view error_code, std::string_view message) {
    if (auto r = session.stream().write_message(error_message(error_code, message)); !r) {
        session.finish();  // the client is gone
    }
    return ok();
}

Result<void> connect_tcp_op(Session& session, const Json& request) {
    auto address = requested_address(request, 1);
    if (!address) {
        return address.error();
    }
    auto socket = connect_tcp(*address, kConnectTimeout);
    if (!socket) {
        return send_error(session, code::kConnectFailed, socket.error().to_string());
    }
    session.finish();  // from here on the connection carries raw bytes
    FrameStream& stream = session.stream();
    if (!stream.write_message(Json{{"type", "result"}, {"connected", true}})) {
        return ok();
    }
    // What the client sent right after the request was read with it.
    SpliceEnds ends{.a = stream.fd(), .b = socket->get(), .a_first = stream.take_buffered()};
    [[maybe_unused]] auto joined = splice_streams(std::move(ends));  // a failure shows as the close
    return ok();
}

// Holds a listen_tcp listener until its session closes; each guest
// connection is joined to a new connection to the host port.
void serve_listener(int control, UniqueFd listener, std::uint32_t host_port, const HostConnector& connect_host) {
    ConnectionThreads joined(kMaxJoinedPerListener);
    auto join_to_host = [&connect_host, host_port](UniqueFd guest) {
        auto slot = JoinedSlot::take();
        if (!slot) {
            return;  // the guest's client sees its connection closed
        }
        auto host = connect_host(host_port);
        if (!host) {
            log::warn("listen_tcp: {}", host.error().to_string());
            return;
        }
        [[maybe_unused]] auto r = splice_streams(SpliceEnds{.a = guest.get(), .b = host->get()});
    };
    // After the reply the client sends nothing: its closing ends the listener.
    accept_connections(listener.get(), -1, control, joined, join_to_host);
    listener.reset();  // stops listening; joined connections go on
    joined.join_all();
}

Result<void> listen_tcp_op(Session& session, const Json& request) {
    auto address = requested_address(request, 0);
    if (!address) {
        return address.error();
    }
    auto host_port = get_int(request, "host_port");
    if (!host_port) {
        return host_port.error();
    }
    if (*host_port < 1 || *host_port >= std::numeric_limits<std::uint32_t>::max()) {
        return make_error("\"host_port\" must be in 1..4294967294");
    }
    const HostConnector& connect_host = session.agent().options().connect_host;
    if (!connect_host) {
        return send_error(session, code::kIoError, "this agent has no connection to the host");
    }
    auto listener = listen_tcp(*address);
    if (!listener) {
        return listener.error();  // EADDRINUSE, EACCES: the message names the address
    }
    auto port = local_port(listener->get());
    if (!port) {
        return port.error();
    }
    session.finish();  // the connection now only holds the listener open
    if (!session.stream().write_message(Json{{"type", "result"}, {"port", *port}})) {
        return ok();
    }
    serve_listener(session.stream().fd(), std::move(*listener), static_cast<std::uint32_t>(*host_port), connect_host);
    return ok();
}

}  // namespace

void register_forward_ops(OpTable& ops) {
    ops.emplace("connect_tcp", connect_tcp_op);
    ops.emplace("listen_tcp", listen_tcp_op);
}

}  // namespace sbx::agent

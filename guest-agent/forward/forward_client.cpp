#include "guest-agent/forward/forward_client.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <thread>

#include "base/unix_socket.hpp"
#include "base/event_fd.hpp"
#include "base/log.hpp"
#include "guest-agent/forward/connection_threads.hpp"
#include "guest-agent/forward/splice.hpp"
#include "guest-agent/forward/tcp_socket.hpp"

namespace sbx::agent {
namespace {

constexpr std::chrono::seconds kTargetConnectTimeout{10};
// The agent's own connect timeout (docs/agent-protocol.md, "connect_tcp").
constexpr std::chrono::seconds kAgentConnectTimeout{30};

// Closes with a reset, so a client whose forward failed sees an error
// rather than a clean end of stream.
void reset_connection(UniqueFd connection) {
    linger abort{1, 0};
    ::setsockopt(connection.get(), SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
}

}  // namespace

Result<GuestStream> open_tcp(AgentClient client, std::string_view guest_host, std::uint16_t port) {
    if (auto r = client.send_request("connect_tcp", Json{{"host", guest_host}, {"port", port}}); !r) {
        return r.error();
    }
    // The agent itself waits up to kAgentConnectTimeout for the guest address.
    auto deadline = client.reply_deadline();
    if (deadline) {
        *deadline += kAgentConnectTimeout;
    }
    auto reply = client.read_reply(deadline);
    if (!reply) {
        return reply.error();
    }
    auto connected = reply_bool(*reply, "connected");
    if (reply_type(*reply) != "result" || !connected || !*connected) {
        return make_error("unexpected reply to connect_tcp");
    }
    // The client's FrameStream owns the socket: keep a duplicate and let it
    // go. The stream is raw from here: no receive timeout (the splice polls).
    UniqueFd fd(::dup(client.stream().fd()));
    if (!fd) {
        return sys_error("dup");
    }
    client.set_reply_timeout(std::chrono::milliseconds(0));
    return GuestStream{std::move(fd), client.stream().take_buffered()};
}

Result<GuestStream> open_tcp(const AgentEndpoint& endpoint, std::string_view guest_host, std::uint16_t port) {
    auto client = AgentClient::connect(endpoint);
    if (!client) {
        return client.error();
    }
    return open_tcp(std::move(*client), guest_host, port);
}

// --- PortForwarder --------------------------------------------------------

struct PortForwarder::State {
    AgentEndpoint endpoint;
    std::string guest_host;
    std::uint16_t guest_port = 0;
    UniqueFd listener;
    std::uint16_t port = 0;
    EventFd stop;  // signalled once and never consumed: readable for every poll
    ConnectionThreads connections{kMaxForwardedConnections};
    std::thread acceptor;
    bool stopped = false;

    explicit State(EventFd stop_event) : stop(std::move(stop_event)) {}

    void forward(UniqueFd client) {
        auto guest = open_tcp(endpoint, guest_host, guest_port);
        if (!guest) {
            log::warn("forward to guest port {}: {}", guest_port, guest.error().to_string());
            reset_connection(std::move(client));
            return;
        }
        [[maybe_unused]] auto r = splice_streams(SpliceEnds{.a = client.get(),
                                                            .b = guest->fd.get(),
                                                            .b_first = std::move(guest->received),
                                                            .stop_fd = stop.fd()});
    }
};

Result<PortForwarder> PortForwarder::start(AgentEndpoint endpoint, std::string_view listen_host,
                                           std::uint16_t local_port, std::string guest_host,
                                           std::uint16_t guest_port) {
    auto address = parse_tcp_address(listen_host, local_port);
    if (!address) {
        return address.error();
    }
    // The guest address is checked here rather than once per connection.
    if (auto guest = parse_tcp_address(guest_host, guest_port); !guest) {
        return guest.error();
    }
    auto stop = EventFd::create();
    if (!stop) {
        return stop.error();
    }
    auto listener = listen_tcp(*address);
    if (!listener) {
        return listener.error();
    }
    auto port = sbx::agent::local_port(listener->get());
    if (!port) {
        return port.error();
    }
    auto state = std::make_unique<State>(std::move(*stop));
    state->endpoint = std::move(endpoint);
    state->guest_host = std::move(guest_host);
    state->guest_port = guest_port;
    state->listener = std::move(*listener);
    state->port = *port;
    State* s = state.get();
    state->acceptor = std::thread([s] {
        auto forward = [s](UniqueFd client) { s->forward(std::move(client)); };
        accept_connections(s->listener.get(), s->stop.fd(), -1, s->connections, forward);
    });
    return PortForwarder(std::move(state));
}

PortForwarder::PortForwarder(std::unique_ptr<State> state) : state_(std::move(state)) {}
PortForwarder::PortForwarder(PortForwarder&&) noexcept = default;
PortForwarder& PortForwarder::operator=(PortForwarder&& other) noexcept {
    if (this != &other) {
        stop();
        state_ = std::move(other.state_);
    }
    return *this;
}
PortForwarder::~PortForwarder() { stop(); }

std::uint16_t PortForwarder::local_port() const { return state_->port; }

void PortForwarder::stop() {
    if (!state_ || state_->stopped) {
        return;
    }
    state_->stopped = true;
    [[maybe_unused]] auto r = state_->stop.signal();
    state_->acceptor.join();
    state_->connections.join_all();
    state_->listener.reset();
}

// --- ReverseForwarder -----------------------------------------------------

struct ReverseForwarder::State {
    TcpAddress target;
    std::string path;  // "<uds_path>_<vsock_port>", where the VMM delivers guest connections
    UniqueFd listener;
    std::optional<AgentClient> control;  // holds the guest listener open
    std::uint16_t guest_port = 0;
    EventFd stop;
    ConnectionThreads connections{kMaxForwardedConnections};
    std::thread acceptor;
    bool stopped = false;

    explicit State(EventFd stop_event) : stop(std::move(stop_event)) {}

    void forward(UniqueFd from_guest) {
        auto host = connect_tcp(target, kTargetConnectTimeout);
        if (!host) {
            log::warn("reverse forward from guest port {}: {}", guest_port, host.error().to_string());
            return;  // the guest's client sees its connection closed
        }
        [[maybe_unused]] auto r =
            splice_streams(SpliceEnds{.a = from_guest.get(), .b = host->get(), .stop_fd = stop.fd()});
    }
};

Result<ReverseForwarder> ReverseForwarder::start(AgentEndpoint endpoint, std::string_view guest_host,
                                                 std::uint16_t guest_port, std::uint32_t vsock_port,
                                                 std::string_view target_host, std::uint16_t target_port) {
    auto target = parse_tcp_address(target_host, target_port);
    if (!target) {
        return target.error();
    }
    auto stop = EventFd::create();
    if (!stop) {
        return stop.error();
    }
    auto state = std::make_unique<State>(std::move(*stop));
    state->target = std::move(*target);
    // Listening before the guest does, so its first connection finds us.
    state->path = fmt::format("{}_{}", endpoint.uds_path, vsock_port);
    auto listener = listen_unix(state->path);  // mode 0600 from the start (base/unix_socket)
    if (!listener) {
        return listener.error();
    }
    state->listener = std::move(*listener);
    auto unlink_on_error = [&state] { ::unlink(state->path.c_str()); };
    auto listening = listen_in_guest(endpoint, guest_host, guest_port, vsock_port);
    if (!listening) {
        unlink_on_error();
        return listening.error();
    }
    state->guest_port = listening->guest_port;
    state->control.emplace(std::move(listening->control));
    State* s = state.get();
    state->acceptor = std::thread([s] {
        auto forward = [s](UniqueFd from_guest) { s->forward(std::move(from_guest)); };
        // The agent's closing the control connection (the guest is gone) ends accepting.
        accept_connections(s->listener.get(), s->stop.fd(), s->control->stream().fd(), s->connections, forward);
    });
    return ReverseForwarder(std::move(state));
}

Result<std::uint16_t> listen_in_guest(AgentClient& control, std::string_view guest_host, std::uint16_t guest_port,
                                      std::uint32_t vsock_port) {
    auto reply = control.call("listen_tcp", Json{{"host", guest_host}, {"port", guest_port}, {"host_port", vsock_port}});
    if (!reply) {
        return reply.error();
    }
    auto port = reply_u64(*reply, "port", 65535);
    if (reply_type(*reply) != "result" || !port || *port == 0) {
        return make_error("unexpected reply to listen_tcp");
    }
    return static_cast<std::uint16_t>(*port);
}

Result<GuestListener> listen_in_guest(const AgentEndpoint& endpoint, std::string_view guest_host,
                                      std::uint16_t guest_port, std::uint32_t vsock_port) {
    auto control = AgentClient::connect(endpoint);
    if (!control) {
        return control.error();
    }
    auto port = listen_in_guest(*control, guest_host, guest_port, vsock_port);
    if (!port) {
        return port.error();
    }
    return GuestListener{std::move(*control), *port};
}

ReverseForwarder::ReverseForwarder(std::unique_ptr<State> state) : state_(std::move(state)) {}
ReverseForwarder::ReverseForwarder(ReverseForwarder&&) noexcept = default;
ReverseForwarder& ReverseForwarder::operator=(ReverseForwarder&& other) noexcept {
    if (this != &other) {
        stop();
        state_ = std::move(other.state_);
    }
    return *this;
}
ReverseForwarder::~ReverseForwarder() { stop(); }

std::uint16_t ReverseForwarder::guest_port() const { return state_->guest_port; }

void ReverseForwarder::stop() {
    if (!state_ || state_->stopped) {
        return;
    }
    state_->stopped = true;
    [[maybe_unused]] auto r = state_->stop.signal();
    state_->acceptor.join();
    state_->control.reset();  // the agent closes the guest listener
    state_->connections.join_all();
    state_->listener.reset();
    ::unlink(state_->path.c_str());
}

}  // namespace sbx::agent

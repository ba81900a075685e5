// TCP over WebSockets (docs/api.md, "TCP over a WebSocket"): a forward
// into the guest (GET .../tcp/ws: connect_tcp through the agent), and a
// reverse forward (GET .../tcp/listen/ws: the agent's listen_tcp, whose
// guest connections arrive at the VMM's hybrid-vsock listener
// "<uds>_<port>" (docs/vmm-control.md) and are announced by id; each is
// picked up with GET .../tcp/accept/ws?connection=ID). The bytes are
// carried by relay_tcp (tcp_relay.hpp). What the query or the sandbox's
// state refuses is the API's JSON error before the 101; after it, errors
// are messages and close codes as for exec over a WebSocket.
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <charconv>

#include "base/event_fd.hpp"
#include "base/unix_socket.hpp"
#include "guest-agent/forward/connection_threads.hpp"
#include "guest-agent/forward/forward_client.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"
#include "host-tools/sbxd/daemon/tcp_relay.hpp"
#include "host-tools/sbxd/daemon/ws_exec.hpp"

namespace sbx::sbxd {

namespace {

using http::WsChannel;
using http::WsMessage;
using nlohmann::json;

// A guest connection not picked up this soon is closed.
constexpr std::chrono::seconds kPickUpTimeout{30};

Result<std::uint16_t> port_param(const QueryParams& query, std::uint16_t lowest) {
    auto it = query.find("port");
    unsigned value = 0;
    if (it == query.end()) {
        return api::invalid_argument("port is required (?port=P)");
    }
    const auto* end = it->second.data() + it->second.size();
    auto [ptr, ec] = std::from_chars(it->second.data(), end, value);
    if (ec != std::errc() || ptr != end || value < lowest || value > 65535) {
        return api::invalid_argument(fmt::format("port must be a number {}..65535", lowest));
    }
    return static_cast<std::uint16_t>(value);
}

// The agent's rule (docs/agent-protocol.md, "Port forwarding"): a numeric
// IPv4 or IPv6 address, or localhost; default 127.0.0.1.
Result<std::string> host_param(const QueryParams& query) {
    auto it = query.find("host");
    if (it == query.end()) {
        return std::string("127.0.0.1");
    }
    in6_addr address{};
    if (it->second == "localhost" || ::inet_pton(AF_INET, it->second.c_str(), &address) == 1 ||
        ::inet_pton(AF_INET6, it->second.c_str(), &address) == 1) {
        return it->second;
    }
    return api::invalid_argument("host must be a numeric IPv4 or IPv6 address or localhost");
}

struct GuestTarget {
    std::string host;
    std::uint16_t port = 0;
};

Result<GuestTarget> parse_target_query(const http::Request& request, std::uint16_t lowest_port) {
    auto query = query_params(request, {"port", "host"});
    if (!query) {
        return query.error();
    }
    auto port = port_param(*query, lowest_port);
    if (!port) {
        return port.error();
    }
    auto host = host_param(*query);
    if (!host) {
        return host.error();
    }
    return GuestTarget{std::move(*host), *port};
}

// The socket file of a reverse forward's vsock listener, removed with it.
struct ListenerPath {
    std::string path;
    explicit ListenerPath(std::string socket_path) : path(std::move(socket_path)) {}
    ListenerPath(const ListenerPath&) = delete;
    ListenerPath& operator=(const ListenerPath&) = delete;
    ~ListenerPath() { ::unlink(path.c_str()); }
};

}  // namespace

Result<void> GuestRoutes::reachable(const std::string& sandbox_id) const {
    auto sandbox = store_.get_sandbox(sandbox_id);
    if (!sandbox) {
        return sandbox.error();
    }
    if (sandbox->state != SandboxState::Running && sandbox->state != SandboxState::Paused) {
        return Error{fmt::format("sandbox {} is {}: resume it first", sandbox_id, to_string(sandbox->state)), 0,
                     std::string(api::code::kInvalidState)};
    }
    return ok();
}

http::Response GuestRoutes::tcp_ws(const Request& request, const PathParams& params) const {
    auto target = parse_target_query(request, 1);
    if (!target) {
        return Response::error(target.error(), request.request_id);
    }
    const std::string& id = params.at("id");
    if (auto r = reachable(id); !r) {
        return Response::error(r.error(), request.request_id);
    }
    Response response;
    response.status = 101;
    response.websocket = [this, id, target = *target, request_id = request.request_id](WsChannel& channel) {
        auto client = connect(id);
        if (!client) {
            return ws_fail(channel, client.error(), request_id);
        }
        // `client` keeps the activity lease; its connection becomes the stream.
        auto stream = agent::open_tcp(std::move(**client), target.host, target.port);
        if (!stream) {
            return ws_fail(channel, guest_error(stream.error()), request_id);
        }
        if (!channel.send(WsMessage{true, json{{"type", "connected"}}.dump()})) {
            return;
        }
        relay_tcp(channel, std::move(stream->fd), std::move(stream->received), request_id);
    };
    return response;
}

http::Response GuestRoutes::tcp_listen_ws(const Request& request, const PathParams& params) const {
    auto target = parse_target_query(request, 0);
    if (!target) {
        return Response::error(target.error(), request.request_id);
    }
    const std::string& id = params.at("id");
    if (auto r = reachable(id); !r) {
        return Response::error(r.error(), request.request_id);
    }
    Response response;
    response.status = 101;
    response.websocket = [this, id, target = *target, request_id = request.request_id](WsChannel& channel) {
        serve_tcp_listen(id, target.host, target.port, request_id, channel);
    };
    return response;
}

void GuestRoutes::serve_tcp_listen(const std::string& id, const std::string& host, std::uint16_t port,
                                   const std::string& request_id, WsChannel& channel) const {
    auto control = connect(id);
    if (!control) {
        return ws_fail(channel, control.error(), request_id);
    }
    auto address = driver_.agent(id);
    if (!address) {
        return ws_fail(channel, address.error(), request_id);
    }
    const std::uint64_t listener_id = pending_->new_listener();
    const std::uint32_t vsock_port = PendingTcpConnections::vsock_port(listener_id);
    // Listening before the guest does, so that its first connection finds it.
    // 0666: a jailed VMM, another uid, connects; only it and sbxd can reach
    // its vmm/ folder (0700, its own).
    ListenerPath path{fmt::format("{}_{}", address->uds_path, vsock_port)};
    auto listener = listen_unix(path.path, Blocking::Yes, 128, SocketAccess{0666});
    if (!listener) {
        return ws_fail(channel, Error{listener.error().to_string(), 0, std::string(api::code::kInternal)}, request_id);
    }
    auto bound = agent::listen_in_guest(**control, host, port, vsock_port);
    if (!bound) {
        return ws_fail(channel, guest_error(bound.error()), request_id);
    }
    auto stop = EventFd::create();
    if (!stop) {
        return ws_fail(channel, Error{stop.error().to_string(), 0, std::string(api::code::kInternal)}, request_id);
    }
    auto hook = channel.on_gone([&stop] { [[maybe_unused]] auto r = stop->signal(); });
    if (!channel.send(WsMessage{true, json{{"type", "listening"}, {"host", host}, {"port", *bound}}.dump()})) {
        return;
    }
    const int control_fd = (*control)->stream().fd();
    while (!channel.gone()) {
        pollfd fds[3] = {{stop->fd(), POLLIN, 0}, {control_fd, POLLIN, 0}, {listener->get(), POLLIN, 0}};
        int ready = ::poll(fds, 3, 1000);
        pending_->expire(listener_id, PendingTcpConnections::Clock::now());
        if (ready < 0 && errno != EINTR) {
            break;
        }
        if (fds[0].revents != 0) {
            break;
        }
        if (fds[1].revents != 0 && agent::silent_connection_closed(control_fd)) {
            ws_fail(channel,
                 Error{"the guest's listener ended (the sandbox stopped or its agent went away)", 0,
                       std::string(api::code::kAgentUnavailable)},
                 request_id);
            break;
        }
        if (fds[2].revents == 0) {
            continue;
        }
        UniqueFd connection(::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!connection) {
            continue;
        }
        auto connection_id = pending_->add(id, listener_id, std::move(connection),
                                           PendingTcpConnections::Clock::now() + kPickUpTimeout);
        if (!connection_id) {
            continue;  // closed at once, as the agent does past its limit
        }
        if (!channel.send(WsMessage{true, json{{"type", "connection"}, {"id", *connection_id}}.dump()})) {
            break;
        }
    }
    pending_->expire(listener_id, PendingTcpConnections::Clock::time_point::max());
    channel.close(http::WsClose{http::ws_close::kNormal, ""});
}

http::Response GuestRoutes::tcp_accept_ws(const Request& request, const PathParams& params) const {
    auto query = query_params(request, {"connection"});
    if (!query) {
        return Response::error(query.error(), request.request_id);
    }
    auto it = query->find("connection");
    if (it == query->end()) {
        return Response::error(api::invalid_argument("connection is required (?connection=ID)"),
                               request.request_id);
    }
    const std::string& id = params.at("id");
    auto connection = pending_->take(id, it->second);
    if (!connection) {
        return Response::error(
            Error{fmt::format("no guest connection {} waits in sandbox {} (taken, or not picked up within {} s)",
                              it->second, id, kPickUpTimeout.count()),
                  0, std::string(api::code::kNotFound)},
            request.request_id);
    }
    auto stream = std::make_shared<UniqueFd>(std::move(*connection));
    Response response;
    response.status = 101;
    response.websocket = [this, id, stream, request_id = request.request_id](WsChannel& channel) {
        LifecycleScheduler::Lease lease;
        if (access_.lifecycle != nullptr) {
            lease = access_.lifecycle->lease(id);
        }
        if (!channel.send(WsMessage{true, json{{"type", "connected"}}.dump()})) {
            return;
        }
        relay_tcp(channel, std::move(*stream), {}, request_id);
    };
    return response;
}

}  // namespace sbx::sbxd

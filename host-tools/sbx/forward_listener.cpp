#include "host-tools/sbx/forward_listener.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "guest-agent/forward/connection_threads.hpp"
#include "guest-agent/forward/forward_client.hpp"
#include "guest-agent/forward/tcp_socket.hpp"
#include "host-tools/sbx/tcp_bridge.hpp"

namespace sbx::cli {

namespace {

// Closes with a reset, so a local client whose forward failed sees an error.
void reset(UniqueFd connection) {
    linger hard_close{1, 0};
    ::setsockopt(connection.get(), SOL_SOCKET, SO_LINGER, &hard_close, sizeof hard_close);
}

}  // namespace

OpenedWs open_ws(const Context& ctx, const std::string& ws_target) {
    auto opened = WsExecClient::open(ctx.client.address(), ctx.client.api_key(), ws_target);
    if (!opened) {
        return {nullptr, explained(ctx, failure_of(opened.error()))};
    }
    if (opened->declined) {
        return {nullptr, explained(ctx, failure_of(*opened->declined))};
    }
    return {std::move(opened->client), std::nullopt};
}

Result<std::unique_ptr<ForwardListener>> ForwardListener::start(const Context& ctx, std::string id,
                                                                std::uint16_t local_port, std::uint16_t remote_port,
                                                                FailureReport report) {
    // An unknown sandbox is an error now, not at the first connection.
    if (Outcome info = call(ctx, get(target({"v1", "sandboxes", id}))); !info.ok()) {
        return make_coded_error(info.failure().code, "{}", info.failure().message);
    }
    auto stop = EventFd::create();
    if (!stop) {
        return stop.error();
    }
    auto address = agent::parse_tcp_address("127.0.0.1", local_port);
    if (!address) {
        return address.error();
    }
    auto listener = agent::listen_tcp(*address);
    if (!listener) {
        return make_coded_error("local", "listening on {}: {}", address->text, listener.error().to_string());
    }
    auto port = agent::local_port(listener->get());
    if (!port) {
        return port.error();
    }
    return std::unique_ptr<ForwardListener>(new ForwardListener(ctx, std::move(id), std::move(*listener), *port,
                                                                remote_port, std::move(*stop), std::move(report)));
}

ForwardListener::ForwardListener(const Context& ctx, std::string id, UniqueFd listener, std::uint16_t local_port,
                                 std::uint16_t remote_port, EventFd stop, FailureReport report)
    : ctx_(ctx), id_(std::move(id)), listener_(std::move(listener)), local_port_(local_port),
      remote_port_(remote_port), stop_(std::move(stop)), report_(std::move(report)),
      thread_([this] { accept_loop(); }) {}

ForwardListener::~ForwardListener() {
    [[maybe_unused]] auto r = stop_.signal();
    thread_.join();
}

std::string ForwardListener::local_address() const { return fmt::format("127.0.0.1:{}", local_port_); }

void ForwardListener::accept_loop() {
    const std::string ws_target = tcp_ws_target(id_, remote_port_);
    agent::ConnectionThreads connections(agent::kMaxForwardedConnections);
    while (true) {
        pollfd fds[2] = {{stop_.fd(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (fds[0].revents != 0) {
            break;
        }
        UniqueFd connection(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!connection) {
            continue;
        }
        const int abort_fd = stop_.fd();  // stays readable once signalled: every bridge ends
        if (!connections.start([this, &ws_target, abort_fd, c = std::move(connection)]() mutable {
                auto ws = open_ws(ctx_, ws_target);
                if (!ws.client) {
                    report_("a local connection", ws.failure->message);
                    return reset(std::move(c));
                }
                BridgeEnd end = carry(*ws.client, LocalStream{c.get(), c.get(), true}, abort_fd);
                if (!end.clean()) {
                    report_("a local connection", end.describe());
                    reset(std::move(c));
                }
            })) {
            report_("a local connection", "too many connections at once");
        }
    }
}  // `connections` joins every carried connection here

}  // namespace sbx::cli

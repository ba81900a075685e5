// sbx forward (host port -> guest port), sbx forward --reverse (guest port
// -> host service) and sbx ssh-proxy (stdin/stdout -> guest port 22), over
// sbxd's TCP WebSocket routes (docs/api.md, "TCP over a WebSocket"). Each
// carried connection is its own WebSocket (tcp_bridge.hpp) on a thread of
// its own, at most kMaxForwardedConnections at once.
#include <signal.h>
#include <sys/signalfd.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>

#include "base/event_fd.hpp"
#include "guest-agent/forward/connection_threads.hpp"
#include "guest-agent/forward/forward_client.hpp"
#include "guest-agent/forward/tcp_socket.hpp"
#include "host-tools/sbx/commands.hpp"
#include "host-tools/sbx/forward_listener.hpp"
#include "host-tools/sbx/ssh_setup.hpp"
#include "host-tools/sbx/tcp_bridge.hpp"

namespace sbx::cli {

namespace {

constexpr std::chrono::seconds kLocalConnectTimeout{10};

// SIGINT and SIGTERM as a readable fd: blocked for this thread and every
// thread started after (signalfd(2)), so Ctrl-C ends the loops cleanly.
class StopSignals {
public:
    static Result<StopSignals> block() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        if (::pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) {
            return sys_error("pthread_sigmask");
        }
        UniqueFd fd(::signalfd(-1, &set, SFD_CLOEXEC));
        if (!fd) {
            return sys_error("signalfd");
        }
        return StopSignals(std::move(fd));
    }
    [[nodiscard]] int fd() const { return fd_.get(); }

private:
    explicit StopSignals(UniqueFd fd) : fd_(std::move(fd)) {}
    UniqueFd fd_;
};

// Events from connection threads, one whole line at a time.
class Reporter {
public:
    explicit Reporter(const Output& out) : out_(out) {}
    void connection_failed(const std::string& what, const std::string& why) {
        std::lock_guard lock(mutex_);
        if (out_.json()) {
            out_.event({{"type", "connection_failed"}, {"connection", what}, {"message", why}});
        } else {
            out_.note(fmt::format("{}: {}", what, why));
        }
    }

private:
    const Output& out_;
    std::mutex mutex_;
};

int run_local_forward(const Context& ctx, const ForwardCommand& command) {
    auto ports = parse_port_pair(command.ports, true);
    if (!ports) {
        return ctx.out.fail(ports.error());
    }
    auto signals = StopSignals::block();
    if (!signals) {
        return own_failure(ctx, failure_of(signals.error()));
    }
    Reporter reporter(ctx.out);
    auto forward = ForwardListener::start(ctx, command.id, ports->first, ports->second,
                                          [&reporter](const std::string& what, const std::string& why) {
                                              reporter.connection_failed(what, why);
                                          });
    if (!forward) {
        return ctx.out.fail(forward.error());
    }
    const std::string local = (*forward)->local_address();
    if (ctx.out.json()) {
        ctx.out.event({{"type", "forwarding"}, {"id", command.id}, {"local", local},
                       {"localPort", (*forward)->local_port()}, {"remotePort", ports->second}});
    } else {
        ctx.out.text(fmt::format("forwarding {} -> {} port {} (Ctrl-C stops)\n", local, command.id, ports->second));
    }
    pollfd stop{signals->fd(), POLLIN, 0};
    while (::poll(&stop, 1, -1) < 0 && errno == EINTR) {
    }
    forward->reset();  // every open connection ends; joined here
    if (ctx.out.json()) {
        ctx.out.event({{"type", "stopped"}, {"id", command.id}, {"local", local}});
    }
    return kExitOk;
}

void reverse_one(const Context& ctx, Reporter& reporter, const std::string& id, const std::string& connection,
                 const agent::TcpAddress& service, int abort_fd) {
    auto ws = open_ws(ctx, tcp_accept_target(id, connection));
    if (!ws.client) {
        return reporter.connection_failed("guest connection " + connection, ws.failure->message);
    }
    auto local = agent::connect_tcp(service, kLocalConnectTimeout);
    if (!local) {
        reporter.connection_failed("guest connection " + connection,
                                   fmt::format("connecting to {}: {}", service.text, local.error().to_string()));
        return ws.client->abort();  // sbxd closes the guest's connection
    }
    BridgeEnd end = carry(*ws.client, LocalStream{local->get(), local->get(), true}, abort_fd);
    if (!end.clean()) {
        reporter.connection_failed("guest connection " + connection, end.describe());
    }
}

int run_reverse_forward(const Context& ctx, const ForwardCommand& command) {
    auto ports = parse_port_pair(command.ports, true);  // REMOTE:LOCAL, REMOTE 0: the guest picks one
    if (!ports) {
        return ctx.out.fail(ports.error());
    }
    auto signals = StopSignals::block();
    auto abort_all = EventFd::create();
    auto service = agent::parse_tcp_address("127.0.0.1", ports->second);
    if (!signals || !abort_all || !service) {
        return own_failure(ctx, failure_of(!signals ? signals.error() : !abort_all ? abort_all.error() : service.error()));
    }
    auto control = open_ws(ctx, tcp_listen_target(command.id, ports->first));
    if (!control.client) {
        return ctx.out.fail(*control.failure);
    }
    Reporter reporter(ctx.out);
    bool stopped = false;
    std::string error;
    std::uint16_t close_code = 0;
    std::string close_reason;
    auto done = EventFd::create();
    if (!done) {
        return own_failure(ctx, failure_of(done.error()));
    }
    // Ctrl-C closes the control WebSocket, which ends the guest's listener.
    std::thread watcher([&] {
        pollfd fds[2] = {{signals->fd(), POLLIN, 0}, {done->fd(), POLLIN, 0}};
        while (::poll(fds, 2, -1) < 0 && errno == EINTR) {
        }
        if (fds[0].revents != 0) {
            control.client->post([&] {
                stopped = true;
                control.client->close();
            });
        }
    });
    {
        agent::ConnectionThreads connections(agent::kMaxForwardedConnections);
        WsExecClient::Handlers handlers;
        handlers.message = [&](bool text, std::string_view data) {
            Json message = text ? Json::parse(data, nullptr, false) : Json();
            const std::string type = message.is_object() ? message.value("type", "") : "";
            if (type == "listening") {
                if (ctx.out.json()) {
                    ctx.out.event({{"type", "forwarding"}, {"reverse", true}, {"id", command.id},
                                   {"remotePort", message.value("port", 0)}, {"local", service->text}});
                } else {
                    ctx.out.text(fmt::format("forwarding {} port {} -> {} (Ctrl-C stops)\n", command.id,
                                             message.value("port", 0), service->text));
                }
            } else if (type == "connection") {
                const int abort_fd = abort_all->fd();
                if (!connections.start([&, abort_fd, id = message.value("id", "")] {
                        reverse_one(ctx, reporter, command.id, id, *service, abort_fd);
                    })) {
                    reporter.connection_failed("a guest connection", "too many connections at once");
                }
            } else if (type == "error") {
                error = fmt::format("{}: {}", message.value("code", "error"), message.value("message", ""));
            }
        };
        handlers.closed = [&](std::uint16_t code, std::string reason) {
            close_code = code;
            close_reason = std::move(reason);
        };
        control.client->run(std::move(handlers));
        [[maybe_unused]] auto a = abort_all->signal();
    }
    [[maybe_unused]] auto d = done->signal();
    watcher.join();
    if (stopped) {
        if (ctx.out.json()) {
            ctx.out.event({{"type", "stopped"}, {"id", command.id}, {"reverse", true}});
        }
        return kExitOk;
    }
    BridgeEnd end{close_code, close_reason, error};
    return ctx.out.fail(make_coded_error("forward_ended", "the reverse forward ended: {}", end.describe()));
}

}  // namespace

int run_forward(const Context& ctx, const ForwardCommand& command) {
    return command.reverse ? run_reverse_forward(ctx, command) : run_local_forward(ctx, command);
}

int run_ssh_proxy(const Context& ctx, const SshProxyCommand& command) {
    const std::string id = strip_sbx_suffix(command.host);
    if (command.authorize) {
        if (auto authorized = authorize_ssh_key(ctx, id); !authorized) {
            // ssh then reports its own failure; say why here.
            ctx.out.note("sbx ssh-proxy: " + authorized.error().to_string());
        }
    }
    auto ws = open_ws(ctx, tcp_ws_target(id, command.port));
    if (!ws.client) {
        return ctx.out.fail(*ws.failure);
    }
    BridgeEnd end = carry(*ws.client, LocalStream{STDIN_FILENO, STDOUT_FILENO, false});
    if (!end.clean()) {
        return ctx.out.fail(make_coded_error("forward_ended", "{} port {}: {}", id, command.port, end.describe()));
    }
    return kExitOk;
}

}  // namespace sbx::cli

// sbxd's real HTTP server and API over a real sbx-agent on the host, for
// guest_routes_test.sh: the agent listens on a Unix socket, and a tiny
// stand-in for the VMM's hybrid vsock socket (docs/vmm-control.md:
// "CONNECT 52\n" answered "OK 1\n", then the bytes both ways) sits in
// front of it, where the test driver's agent() points; the agent reaches
// "host vsock port P" at its path + "_P", as the VMM delivers guest
// connections (reverse forwards). Sandbox sbx_run
// runs; sbx_off exists and is stopped.
//
// Usage: sbxd_guest_fixture SBX_AGENT DIR. Serves DIR/sbxd.sock and TCP on
// loopback (/mcp too), prints "tcp ADDRESS", "key_host|key_scoped|key_read
// SECRET" and "listening" once it does, and runs until SIGTERM or SIGINT.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>

#include "base/unix_socket.hpp"
#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/mcp_endpoint.hpp"
#include "host-tools/sbxd/http/server.hpp"

using namespace sbx;
using namespace sbx::sbxd;

namespace {

constexpr const char* kToken = "00112233445566778899aabbccddeeff";

class FixtureDriver final : public SandboxDriver {
public:
    FixtureDriver(std::string vsock, std::string dir) : vsock_(std::move(vsock)), dir_(std::move(dir)) {}
    Result<CreateOutcome> create(const CreateSpec&) override { return none(); }
    Result<SandboxRecord> stop(const std::string&, const api::StopRequest&) override { return none(); }
    Result<ResumeOutcome> resume(const std::string&, const api::ResumeRequest&) override { return none(); }
    Result<std::vector<SandboxRecord>> fork(const std::string&, const api::ForkRequest&,
                                            const std::optional<IdempotencyClaim>&,
                                            const std::vector<std::string>&) override {
        return none();
    }
    Result<void> remove(const std::string&) override { return none(); }
    Result<SnapshotRecord> snapshot(const std::string&, const api::SnapshotRequest&) override { return none(); }
    Result<void> remove_snapshot(const std::string&) override { return none(); }
    Result<AgentAddress> agent(const std::string& id) override {
        if (id != "sbx_run") {
            return make_coded_error("invalid_state", "sandbox {} is stopped", id);
        }
        return AgentAddress{vsock_, kToken};
    }
    Result<std::string> disk(const std::string&) override { return none(); }
    // DIR/ID-console.log: the test writes it.
    Result<std::string> console_log(const std::string& id) override {
        return dir_ + "/" + id + "-console.log";
    }

private:
    static Error none() { return make_coded_error("not_implemented", "not in this fixture"); }
    std::string vsock_;
    std::string dir_;
};

// Copies bytes both ways until both directions end; a half-close is
// passed on (shutdown(SHUT_WR)), as the VMM's vsock does. A thread per
// direction, so that a full socket one way (cat echoing stdin that comes
// faster than it is read back) never stops the other.
void copy_one_way(int from, int to) {
    char buffer[65536];
    while (true) {
        ssize_t n = ::read(from, buffer, sizeof buffer);
        if (n == 0) {
            ::shutdown(to, SHUT_WR);
            return;
        }
        if (n < 0 || !write_all(to, buffer, static_cast<std::size_t>(n))) {
            ::shutdown(from, SHUT_RDWR);
            ::shutdown(to, SHUT_RDWR);
            return;
        }
    }
}

void splice_both(UniqueFd a, UniqueFd b) {
    std::thread back([&] { copy_one_way(b.get(), a.get()); });
    copy_one_way(a.get(), b.get());
    back.join();
}

// The hybrid vsock stand-in: one thread per connection.
void serve_vsock(int listen_fd, std::string agent_path) {
    while (true) {
        int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            return;
        }
        std::thread([client = UniqueFd(fd), agent_path]() mutable {
            std::string line;
            char c = 0;
            while (line.size() < 64 && ::read(client.get(), &c, 1) == 1 && c != '\n') {
                line += c;
            }
            auto agent = connect_unix(agent_path);
            if (line != "CONNECT 52" || !agent) {
                return;
            }
            if (!write_all(client.get(), "OK 1\n", 5)) {
                return;
            }
            splice_both(std::move(client), std::move(*agent));
        }).detach();
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s SBX_AGENT DIR\n", argv[0]);
        return 2;
    }
    ::signal(SIGPIPE, SIG_IGN);
    const std::string dir = argv[2];
    const std::string agent_sock = dir + "/agent.sock";
    const std::string vsock = dir + "/vsock.sock";
    pid_t agent = ::fork();
    if (agent == 0) {
        // --host-unix: a guest connection to host vsock port P arrives at VSOCK_P (reverse forwards).
        ::execl(argv[1], argv[1], "--listen-unix", agent_sock.c_str(), "--host-unix", vsock.c_str(), "--token", kToken,
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    for (int i = 0; i < 100 && ::access(agent_sock.c_str(), F_OK) != 0; ++i) {
        ::usleep(50'000);
    }
    auto vsock_fd = listen_unix(vsock, Blocking::Yes);
    auto store = Store::open(dir + "/sbxd.db");
    if (!vsock_fd || !store) {
        std::fprintf(stderr, "fixture: %s\n",
                     (!vsock_fd ? vsock_fd.error() : store.error()).to_string().c_str());
        ::kill(agent, SIGKILL);
        return 1;
    }
    std::thread(serve_vsock, vsock_fd->get(), agent_sock).detach();
    for (const auto& [id, state] : {std::pair{"sbx_run", SandboxState::Running}, {"sbx_off", SandboxState::Stopped}}) {
        SandboxRecord s;
        s.id = id;
        s.name = id;
        s.from = "default";
        s.size = "small";
        s.state = state;
        s.created_at = system_now();
        s.last_activity_at = s.created_at;
        if (auto r = (*store)->create_sandbox(s, std::nullopt); !r) {
            std::fprintf(stderr, "fixture: %s\n", r.error().to_string().c_str());
            return 1;
        }
    }
    // Keys for the TCP listener: host-wide, scoped to sbx_run, read-only.
    std::vector<std::pair<std::string, std::string>> keys;
    for (auto [name, scope, read_only] : {std::tuple{"host", std::optional<std::string>(), false},
                                          std::tuple{"scoped", std::optional<std::string>("sbx_run"), false},
                                          std::tuple{"read", std::optional<std::string>(), true}}) {
        auto key = make_api_key(name, scope, system_now(), KeyLimits{read_only});
        if (!key || !(*store)->add_api_key(key->record)) {
            std::fprintf(stderr, "fixture: cannot make the %s key\n", name);
            return 1;
        }
        keys.emplace_back(name, key->secret);
    }
    FixtureDriver driver(vsock, dir);
    ApiService service(**store, driver, DaemonInfo{"fixture", "test", dir, api::HostLimits{}});
    const McpEndpoint mcp(service, mcp::ServerInfo{"sandboxer", "Sandboxer", "test", mcp::kInstructions}, {});
    service.serve_mcp([&mcp](const http::Request& request, const http::PathParams&) { return mcp.handle(request); });
    boost::asio::io_context io;
    boost::asio::thread_pool workers(4);
    int status = 0;
    {
        http::Server server(
            io, workers, [&service](http::Request request) { return service.handle(std::move(request)); },
            http::ServerLimits{}, [&service](const http::Request& request) { return service.streams_body(request); });
        auto bound = server.listen({http::Transport::Unix, dir + "/sbxd.sock", "", 0});
        auto tcp = server.listen({http::Transport::Tcp, "", "127.0.0.1", 0});
        if (!bound || !tcp) {
            std::fprintf(stderr, "fixture: %s\n", (bound ? tcp.error() : bound.error()).to_string().c_str());
            status = 1;
        } else {
            std::printf("tcp %s\n", tcp->c_str());
            for (const auto& [name, secret] : keys) {
                std::printf("key_%s %s\n", name.c_str(), secret.c_str());
            }
            std::printf("listening\n");
            std::fflush(stdout);
            boost::asio::signal_set signals(io, SIGTERM, SIGINT);
            signals.async_wait([&](const boost::system::error_code&, int) {
                server.close();
                io.stop();
            });
            io.run();
        }
    }
    workers.join();
    ::kill(agent, SIGTERM);
    ::waitpid(agent, nullptr, 0);
    return status;
}

// sbx-agent: the guest side of Sandboxer (docs/agent-protocol.md). Listens
// on vsock port 52, announces itself to the host on port 53, and serves
// each connection on its own thread.
#include <sys/resource.h>

#include <csignal>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

#include "base/log.hpp"
#include "guest-agent/agent/agent.hpp"
#include "guest-agent/agent/listener.hpp"
#include "guest-agent/exec/passwd.hpp"
#include "guest-agent/freeze/freeze_kernel.hpp"

namespace {

void usage() {
    std::fputs(
        "usage: sbx-agent [--listen-unix PATH] [--host-unix PREFIX] [--port N] [--token T] [--env-file PATH]\n"
        "                 [--hello-timeout SECONDS] [--default-user NAME]\n"
        "  default: vsock port 52; the token comes from sbx.token= on the kernel command line, the\n"
        "  hello deadline from sbx.hello_timeout= (default 60 s);\n"
        "  --default-user: who runs an exec and owns what a file op makes when the request names\n"
        "  no user (default root);\n"
        "  --listen-unix / --host-unix serve and reach the host over Unix sockets (tests).\n",
        stderr);
}

// Each session holds a few fds (a forward about six: socket, TCP socket,
// two pipes); the usual soft limit of 1024 would cap sessions far below
// DoorLimits::max_sessions.
void raise_fd_limit() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &limit);
    }
}

std::string read_text(const char* path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// The agent in a guest must outlive whatever exhausts the guest's memory
// (a fork bomb's tasks are all small; the OOM killer could pick the agent):
// it takes oom_score_adj -1000 (proc(5)) and returns the value it started
// with, which programs get back (SpawnPlan::oom_score_adj).
std::optional<int> shield_from_oom_killer() {
    const std::string before = read_text("/proc/self/oom_score_adj");
    int original = 0;
    if (std::sscanf(before.c_str(), "%d", &original) != 1) {
        return std::nullopt;
    }
    std::ofstream out("/proc/self/oom_score_adj");
    out << "-1000" << std::flush;
    if (!out) {
        sbx::log::warn("cannot set the agent's oom_score_adj to -1000; the OOM killer may pick it");
        return std::nullopt;
    }
    return original;
}

// Tells the host the agent is ready; the host may not be listening yet (or
// at all), so retry for a minute, quickly at first.
void announce_ready(sbx::agent::Agent& agent, std::chrono::steady_clock::time_point start) {
    using namespace std::chrono;
    for (int attempt = 0; attempt < 150; ++attempt) {
        auto fd = agent.options().connect_host(sbx::agent::kReadyPort);
        if (fd) {
            sbx::agent::FrameStream stream(std::move(*fd));
            auto since_start = duration_cast<milliseconds>(steady_clock::now() - start).count();
            [[maybe_unused]] auto r = stream.write_message(sbx::agent::Json{
                {"type", "ready"},
                {"version", sbx::agent::kProtocolVersion},
                {"agent", sbx::agent::kAgentVersion},
                {"boot_id", agent.boot_id()},
                {"agent_start_ms", since_start}});
            return;
        }
        std::this_thread::sleep_for(attempt < 50 ? milliseconds(100) : seconds(1));
    }
    sbx::log::warn("no host listener on port {}; readiness not announced", sbx::agent::kReadyPort);
}

}  // namespace

int main(int argc, char** argv) {
    const auto start = std::chrono::steady_clock::now();
    // A vanished client or a file-size limit must fail that one write
    // (EPIPE, EFBIG), not kill the agent.
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGXFSZ, SIG_IGN);
    raise_fd_limit();
    std::string listen_unix, host_unix, token, env_file, hello_timeout, default_user;
    bool have_token = false;
    std::uint32_t port = sbx::agent::kAgentPort;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage();
                std::exit(2);
            }
            return argv[++i];
        };
        if (arg == "--listen-unix") {
            listen_unix = value();
        } else if (arg == "--host-unix") {
            host_unix = value();
        } else if (arg == "--port") {
            port = static_cast<std::uint32_t>(std::stoul(value()));
        } else if (arg == "--token") {
            token = value();
            have_token = true;
        } else if (arg == "--env-file") {
            env_file = value();
        } else if (arg == "--hello-timeout") {
            hello_timeout = value();
        } else if (arg == "--default-user") {
            default_user = value();
        } else {
            usage();
            return 2;
        }
    }

    const std::string cmdline = read_text("/proc/cmdline");
    sbx::agent::AgentOptions options;
    options.token = have_token ? token : sbx::agent::token_from_cmdline(cmdline);
    if (listen_unix.empty()) {
        // A restarted agent in a guest restored from a template or forked
        // from a parent: its own token, given by the identity op, comes
        // before the command line's (AgentOptions::token_file).
        options.token_file = sbx::agent::kTokenFile;
        if (auto kept = sbx::agent::kept_token(options.token_file); kept && !have_token) {
            sbx::log::info("the token the identity op gave, kept in {}", options.token_file);
            options.token = *kept;
        }
    }
    if (!hello_timeout.empty()) {
        auto timeout = sbx::agent::hello_timeout_from_cmdline("sbx.hello_timeout=" + hello_timeout);
        if (!timeout) {
            usage();
            return 2;
        }
        options.limits.hello_timeout = *timeout;
    } else if (auto timeout = sbx::agent::hello_timeout_from_cmdline(cmdline)) {
        options.limits.hello_timeout = *timeout;
    } else if (cmdline.find("sbx.hello_timeout=") != std::string::npos) {
        sbx::log::warn("sbx.hello_timeout= wants whole seconds from 1 to 86400; using {} s",
                       std::chrono::duration_cast<std::chrono::seconds>(options.limits.hello_timeout).count());
    }
    if (!env_file.empty()) {
        options.env_file = env_file;
    }
    if (!default_user.empty()) {
        // Checked again at each request (the image may add the user later);
        // a name missing now is only worth a warning.
        if (auto found = sbx::agent::lookup_user(default_user); !found) {
            sbx::log::warn("--default-user {}: {}", default_user, found.error().to_string());
        }
        options.default_user = default_user;
    }
    if (!host_unix.empty()) {
        options.connect_host = [host_unix](std::uint32_t p) { return sbx::agent::connect_unix_host(host_unix, p); };
    } else {
        options.connect_host = [](std::uint32_t p) { return sbx::agent::connect_vsock_host(p); };
    }
    // Only the agent serving vsock runs in a guest; one on a Unix socket
    // (tests, on the host) must never freeze the host's file systems.
    if (listen_unix.empty()) {
        options.freeze_kernel = sbx::agent::make_system_freeze_kernel();
        options.child_oom_score_adj = shield_from_oom_killer();
    }
    auto listener = listen_unix.empty() ? sbx::agent::listen_vsock(port) : sbx::listen_unix(listen_unix);
    if (!listener) {
        sbx::log::error("{}", listener.error().to_string());
        return 1;
    }
    sbx::agent::Agent agent(std::move(options));
    sbx::log::info("listening on {}", listen_unix.empty() ? "vsock port " + std::to_string(port) : listen_unix);
    std::thread([&agent, start] { announce_ready(agent, start); }).detach();

    while (true) {
        auto connection = sbx::agent::accept_connection(listener->get());
        if (!connection) {
            sbx::log::warn("{}", connection.error().to_string());
            std::this_thread::sleep_for(std::chrono::milliseconds(100));  // e.g. EMFILE: back off, keep serving
            continue;
        }
        // The door bounds the threads: pending connections past
        // DoorLimits::max_pending are shut down, sessions past max_sessions
        // refused at their hello.
        try {
            std::thread([&agent, fd = std::move(*connection)]() mutable { agent.serve(std::move(fd)); }).detach();
        } catch (const std::system_error& e) {
            sbx::log::warn("no thread for a connection: {}", e.what());  // the fd closes with the lambda
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
}

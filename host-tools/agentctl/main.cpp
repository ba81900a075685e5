// sbx-agentctl: a small command line over the agent client library
// (docs/agent-protocol.md) for tests, scripts and people. One command per
// run, each on its own connection(s) through the VMM's hybrid vsock socket.
//
// Exit status: the command's own for exec (128+N when killed by signal N,
// 124 on --timeout-ms), 0 for the others on success; 125 when sbx-agentctl
// itself failed (connection, token, bad reply, a reply timeout, local file).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "guest-agent/client/agent_client.hpp"
#include "guest-agent/exec/exec_client.hpp"
#include "guest-agent/files/files_client.hpp"
#include "guest-agent/forward/forward_client.hpp"
#include "guest-agent/identity/identity_client.hpp"
#include "guest-agent/identity/identity_fields.hpp"

namespace {

using namespace sbx;
using namespace sbx::agent;
using Clock = std::chrono::steady_clock;

constexpr int kExitOwnFailure = 125;
constexpr int kExitTimedOut = 124;

int fail(const std::string& what, const Error& error) {
    std::fprintf(stderr, "sbx-agentctl: %s: %s\n", what.c_str(), error.to_string().c_str());
    return kExitOwnFailure;
}

// Writes everything to fd (stdout/stderr of this process); a closed pipe ends us.
void write_fd(int fd, std::span<const std::uint8_t> bytes) {
    while (!bytes.empty()) {
        ssize_t n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            std::_Exit(kExitOwnFailure);
        }
        bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
}

void print_json(const Json& value) { std::cout << value.dump() << std::endl; }

int exit_status(const ExitInfo& exit) {
    if (exit.timed_out) {
        return kExitTimedOut;
    }
    if (exit.signal) {
        return 128 + *exit.signal;
    }
    return exit.code.value_or(kExitOwnFailure);
}

// attach: the end of the output written so far, printed by the signal
// handler when the attach is interrupted (a "disconnect"), so a script can
// reattach from there.
std::atomic<std::uint64_t> g_attach_end{0};

void print_end_offset(std::uint64_t end) {
    char buf[48] = "end_offset=";
    char digits[24];
    int n = 0;
    do {
        digits[n++] = static_cast<char>('0' + end % 10);
        end /= 10;
    } while (end != 0);
    std::size_t len = 11;
    while (n > 0) {
        buf[len++] = digits[--n];
    }
    buf[len++] = '\n';
    (void)!::write(STDERR_FILENO, buf, len);
}

extern "C" void on_attach_signal(int) {
    print_end_offset(g_attach_end.load());
    std::_Exit(130);
}

struct Options {
    AgentEndpoint endpoint;
    double timeout_s = 60;
    // exec
    bool detach = false, with_stdin = false;
    std::string cwd, user, shell;
    std::vector<std::string> env, argv;
    long timeout_ms = 0;
    // proc
    std::string id;
    std::uint64_t offset = 0;
    bool no_follow = false;
    int signal = SIGTERM;
    // files
    std::string local, guest, mode;
    bool mkdirs = false;
    std::uint64_t max_bytes = files::kDefaultMaxDownload;
    // forward
    std::uint16_t local_port = 0;
    std::string target;
    // identity
    std::string generation, seed_hex, mac;
    bool seed_random = false;
    std::string ipv4, gateway;
    std::vector<std::string> dns;
};

Result<AgentClient> connect(const Options& o) {
    auto client = AgentClient::connect(o.endpoint);
    if (!client) {
        return client.error().context("connecting to the agent");
    }
    return client;
}

int cmd_wait(const Options& o) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(o.timeout_s);
    const auto start = Clock::now();
    Error last = make_error("no attempt");
    while (Clock::now() < deadline) {
        AgentEndpoint e = o.endpoint;
        e.timeout = std::chrono::milliseconds(2000);
        // A health that hangs must not outlast --timeout.
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
        e.reply_timeout = std::max(std::chrono::milliseconds(1), std::min(left, e.reply_timeout.count() > 0
                                                                                    ? e.reply_timeout
                                                                                    : left));
        auto client = AgentClient::connect(e);
        if (client) {
            auto health = client->health();
            if (health) {
                double s = std::chrono::duration<double>(Clock::now() - start).count();
                std::cout << Json{{"ready", true}, {"waited_s", s}, {"health", *health}}.dump() << std::endl;
                return 0;
            }
            last = health.error();
            if (error_code(last) == "unauthorized") {
                return fail("health", last);
            }
        } else {
            last = client.error();
            // A refused token will not get better by waiting.
            if (error_code(last) == "unauthorized" || error_code(last) == "bad_token") {
                return fail("hello", last);
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return fail(fmt::format("agent not ready after {} s", o.timeout_s), last);
}

int cmd_wait_ready(const Options& o) {
    auto listener = ReadyListener::listen(o.endpoint.uds_path);
    if (!listener) {
        return fail("listening for the ready announcement", listener.error());
    }
    std::cout << "listening " << listener->path() << std::endl;
    auto ready = listener->wait(std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000)));
    if (!ready) {
        return fail("waiting for the agent's ready message", ready.error());
    }
    print_json(*ready);
    return 0;
}

int cmd_health(const Options& o) {
    auto client = connect(o);
    if (!client) {
        return fail("health", client.error());
    }
    auto health = client->health();
    if (!health) {
        return fail("health", health.error());
    }
    print_json(*health);
    return 0;
}

int cmd_exec(const Options& o) {
    ExecRequest request;
    request.argv = o.argv;
    request.shell = o.shell;
    request.cwd = o.cwd;
    request.user = o.user;
    request.timeout = std::chrono::milliseconds(o.timeout_ms);
    if (request.argv.empty() == request.shell.empty()) {
        std::fprintf(stderr, "sbx-agentctl: exec needs either --shell CMD or -- ARGV...\n");
        return kExitOwnFailure;
    }
    for (const auto& kv : o.env) {
        auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) {
            std::fprintf(stderr, "sbx-agentctl: --env wants K=V, got '%s'\n", kv.c_str());
            return kExitOwnFailure;
        }
        request.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (o.with_stdin) {
        request.stdin_data = std::string(std::istreambuf_iterator<char>(std::cin), {});
    }
    auto client = connect(o);
    if (!client) {
        return fail("exec", client.error());
    }
    if (o.detach) {
        auto ref = exec_detached(*client, request);
        if (!ref) {
            return fail("exec --detach", ref.error());
        }
        std::cout << ref->id << std::endl;
        std::fprintf(stderr, "pid=%d\n", ref->pid);
        return 0;
    }
    auto result = exec(*client, request, [](Channel channel, std::uint64_t, std::span<const std::uint8_t> bytes) {
        write_fd(channel == Channel::Stderr ? STDERR_FILENO : STDOUT_FILENO, bytes);
    });
    if (!result) {
        return fail("exec", result.error());
    }
    return exit_status(*result);
}

int cmd_attach(const Options& o) {
    auto client = connect(o);
    if (!client) {
        return fail("attach", client.error());
    }
    g_attach_end = o.offset;
    struct sigaction sa{};
    sa.sa_handler = on_attach_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    auto result = attach(*client, o.id, o.offset, !o.no_follow,
                         [](Channel channel, std::uint64_t offset, std::span<const std::uint8_t> bytes) {
                             // Written and counted as one step for the disconnect handler.
                             sigset_t stop, old;
                             sigemptyset(&stop);
                             sigaddset(&stop, SIGINT);
                             sigaddset(&stop, SIGTERM);
                             sigprocmask(SIG_BLOCK, &stop, &old);
                             write_fd(channel == Channel::Stderr ? STDERR_FILENO : STDOUT_FILENO, bytes);
                             g_attach_end = offset + bytes.size();
                             sigprocmask(SIG_SETMASK, &old, nullptr);
                         });
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (!result) {
        if (auto first = first_offset_of(result.error())) {
            std::fprintf(stderr, "first_offset=%llu\n", static_cast<unsigned long long>(*first));
        }
        return fail("attach", result.error());
    }
    print_end_offset(result->end_offset);
    if (result->running) {
        std::fprintf(stderr, "running\n");
    } else {
        std::fprintf(stderr, "exit_status=%d\n", exit_status(result->exit));
    }
    return 0;
}

int cmd_status(const Options& o) {
    auto client = connect(o);
    if (!client) {
        return fail("status", client.error());
    }
    auto status = o.id.empty() ? proc_list(*client) : proc_status(*client, o.id);
    if (!status) {
        return fail("status", status.error());
    }
    print_json(*status);
    return 0;
}

int cmd_kill(const Options& o) {
    auto client = connect(o);
    if (!client) {
        return fail("kill", client.error());
    }
    auto sent = proc_signal(*client, o.id, o.signal);
    if (!sent) {
        return fail("kill", sent.error());
    }
    std::cout << (*sent ? "signalled" : "already exited") << std::endl;
    return 0;
}

int cmd_put(const Options& o) {
    files::WriteOptions options;
    options.mkdirs = o.mkdirs;
    if (!o.mode.empty()) {
        try {
            options.mode = static_cast<std::uint32_t>(std::stoul(o.mode, nullptr, 8));
        } catch (const std::exception&) {
            std::fprintf(stderr, "sbx-agentctl: --mode wants octal, got '%s'\n", o.mode.c_str());
            return kExitOwnFailure;
        }
    }
    auto client = connect(o);
    if (!client) {
        return fail("put", client.error());
    }
    const auto start = Clock::now();
    auto bytes = files::write_file_from(*client, o.local, o.guest, options);
    if (!bytes) {
        return fail("put " + o.local + " " + o.guest, bytes.error());
    }
    double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "put %llu bytes in %.3f s\n", static_cast<unsigned long long>(*bytes), s);
    return 0;
}

int cmd_get(const Options& o) {
    auto client = connect(o);
    if (!client) {
        return fail("get", client.error());
    }
    const auto start = Clock::now();
    auto bytes = files::read_file_to(*client, o.guest, o.local, {}, o.max_bytes);
    if (!bytes) {
        return fail("get " + o.guest + " " + o.local, bytes.error());
    }
    double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "got %llu bytes in %.3f s\n", static_cast<unsigned long long>(*bytes), s);
    return 0;
}

int cmd_forward(const Options& o) {
    auto colon = o.target.rfind(':');
    if (colon == std::string::npos || colon == 0) {
        std::fprintf(stderr, "sbx-agentctl: forward wants GUEST_HOST:GUEST_PORT, got '%s'\n", o.target.c_str());
        return kExitOwnFailure;
    }
    std::uint16_t guest_port = 0;
    try {
        unsigned long p = std::stoul(o.target.substr(colon + 1));
        if (p == 0 || p > 65535) {
            throw std::out_of_range("port");
        }
        guest_port = static_cast<std::uint16_t>(p);
    } catch (const std::exception&) {
        std::fprintf(stderr, "sbx-agentctl: bad guest port in '%s'\n", o.target.c_str());
        return kExitOwnFailure;
    }
    // Block the stop signals before the forwarder's threads exist, then wait for one.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    auto forwarder = PortForwarder::start(o.endpoint, "127.0.0.1", o.local_port, o.target.substr(0, colon), guest_port);
    if (!forwarder) {
        return fail("forward", forwarder.error());
    }
    std::cout << "forwarding 127.0.0.1:" << forwarder->local_port() << " -> " << o.target << std::endl;
    int sig = 0;
    sigwait(&stop, &sig);
    forwarder->stop();
    return 0;
}

int cmd_identity(const Options& o) {
    IdentityRequest request;
    if (!o.generation.empty()) {
        std::uint64_t generation = 0;
        const char* end = o.generation.data() + o.generation.size();
        auto [at, error] = std::from_chars(o.generation.data(), end, generation);
        if (error != std::errc() || at != end) {
            std::fprintf(stderr, "sbx-agentctl: --generation wants an integer from 0 to 2^64-1, got '%s'\n",
                         o.generation.c_str());
            return kExitOwnFailure;
        }
        request.generation = generation;
    }
    if (o.seed_random && !o.seed_hex.empty()) {
        std::fprintf(stderr, "sbx-agentctl: give --seed-random or --seed, not both\n");
        return kExitOwnFailure;
    }
    if (o.seed_random) {
        auto seed = random_seed(64);
        if (!seed) {
            return fail("identity --seed-random", seed.error());
        }
        request.seed = std::move(*seed);
    } else if (!o.seed_hex.empty()) {
        auto seed = parse_seed_hex(o.seed_hex);
        if (!seed) {
            return fail("identity --seed", seed.error());
        }
        request.seed = std::move(*seed);
    }
    if (!o.mac.empty()) {
        request.mac = o.mac;
    }
    if (o.ipv4.empty() != o.gateway.empty() || (o.ipv4.empty() && !o.dns.empty())) {
        std::fprintf(stderr, "sbx-agentctl: --ipv4 needs --gateway (and --gateway, --dns need --ipv4)\n");
        return kExitOwnFailure;
    }
    if (!o.ipv4.empty()) {
        auto ipv4 = parse_ipv4_settings(o.ipv4, o.gateway,
                                        o.dns.empty() ? std::nullopt : std::optional(o.dns));
        if (!ipv4) {
            return fail("identity --ipv4", ipv4.error());
        }
        request.ipv4 = std::move(*ipv4);
    }
    auto client = connect(o);
    if (!client) {
        return fail("identity", client.error());
    }
    auto reply = identity(*client, request);
    if (!reply) {
        return fail("identity", reply.error());
    }
    print_json(reply->raw);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::signal(SIGPIPE, SIG_IGN);
    Options o;
    unsigned port = kAgentPort;
    double connect_timeout_s = 10;
    CLI::App app{"sbx-agentctl: talk to the sbx-agent of a running microVM (docs/agent-protocol.md)"};
    app.require_subcommand(1);
    app.add_option("--uds", o.endpoint.uds_path, "the VMM's --vsock uds=PATH")->envname("SBX_AGENT_UDS")->required();
    app.add_option("--token", o.endpoint.token, "the boot's token (sbx.token=)")->envname("SBX_AGENT_TOKEN");
    app.add_option("--port", port, "the agent's vsock port")->capture_default_str();
    app.add_option("--connect-timeout", connect_timeout_s, "seconds for connecting and the hello")
        ->capture_default_str();
    double reply_timeout_s = std::chrono::duration<double>(kDefaultReplyTimeout).count();
    app.add_option("--reply-timeout", reply_timeout_s,
                   "seconds a reply may take (0: no limit); attach and exec without --timeout-ms follow "
                   "their output without one")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);

    auto* wait = app.add_subcommand("wait", "poll health until the agent answers (prints JSON)");
    wait->add_option("--timeout", o.timeout_s, "seconds")->capture_default_str();
    auto* wait_ready = app.add_subcommand(
        "wait-ready", "listen at UDS_53 (start before the VM), print 'listening PATH', wait for the ready message");
    wait_ready->add_option("--timeout", o.timeout_s, "seconds")->capture_default_str();
    auto* health = app.add_subcommand("health", "the agent's health (JSON)");

    auto* exec = app.add_subcommand("exec", "run a command; its output goes to ours, its exit status is ours");
    exec->add_flag("--detach", o.detach, "start it detached, print its id");
    exec->add_option("--cwd", o.cwd, "working directory (default: the user's home)");
    exec->add_option("--user", o.user,
                     "user name or uid (default: the agent's default user, root unless sbx-agent --default-user)");
    exec->add_option("--env", o.env, "K=V, repeatable");
    exec->add_flag("--stdin", o.with_stdin, "send our stdin (read to EOF first)");
    exec->add_option("--timeout-ms", o.timeout_ms, "kill it after this long (exit 124)");
    exec->add_option("--shell", o.shell, "a command line for /bin/sh -c");
    exec->add_option("argv", o.argv, "the program and its arguments (after --)");

    auto* att = app.add_subcommand("attach", "a detached process's output; 'end_offset=N' on stderr at the end");
    att->add_option("id", o.id)->required();
    att->add_option("--offset", o.offset, "log offset to start from")->capture_default_str();
    att->add_flag("--no-follow", o.no_follow, "print what is there now and return");
    auto* status = app.add_subcommand("status", "a detached process's status, or all of them (JSON)");
    status->add_option("id", o.id);
    auto* kill = app.add_subcommand("kill", "signal a detached process");
    kill->add_option("id", o.id)->required();
    kill->add_option("--signal", o.signal, "signal number")->capture_default_str();

    auto* put = app.add_subcommand("put", "copy a local file into the guest");
    put->add_option("local", o.local)->required()->check(CLI::ExistingFile);
    put->add_option("guest", o.guest)->required();
    put->add_option("--mode", o.mode, "octal permission bits (default: the local file's)");
    put->add_flag("--mkdirs", o.mkdirs, "create missing parent directories");
    auto* get = app.add_subcommand("get", "copy a guest file here");
    get->add_option("guest", o.guest)->required();
    get->add_option("local", o.local)->required();
    get->add_option("--max-bytes", o.max_bytes, "refuse a file larger than this (nothing is left at LOCAL)")
        ->capture_default_str();

    auto* fwd = app.add_subcommand("forward", "forward 127.0.0.1:LOCAL_PORT to a guest address until killed");
    fwd->add_option("local_port", o.local_port, "0: any free port (printed)")->required();
    fwd->add_option("target", o.target, "GUEST_HOST:GUEST_PORT")->required();

    auto* ident = app.add_subcommand(
        "identity",
        "a fork's new identity: RNG seed, MAC, IPv4 network, generation; with no options, the current one (JSON)");
    ident->add_option("--generation", o.generation, "store this generation number (0 to 2^64-1) in the agent");
    ident->add_flag("--seed-random", o.seed_random, "reseed the guest's RNG with 64 bytes from our getrandom");
    ident->add_option("--seed", o.seed_hex, "reseed the guest's RNG with these bytes (hex, 32 to 512 bytes)");
    ident->add_option("--mac", o.mac, "set the virtio-net interface's address (aa:bb:cc:dd:ee:ff)");
    ident->add_option("--ipv4", o.ipv4,
                      "give the virtio-net interface exactly this IPv4 address (A.B.C.D/PREFIX), after the MAC");
    ident->add_option("--gateway", o.gateway, "with --ipv4: the default route's gateway, inside that network");
    ident->add_option("--dns", o.dns,
                      "with --ipv4: a DNS server for the guest's /etc/resolv.conf, up to 3 times "
                      "(none: the file is left alone)");

    CLI11_PARSE(app, argc, argv);
    o.endpoint.port = port;
    o.endpoint.timeout = std::chrono::milliseconds(static_cast<long>(connect_timeout_s * 1000));
    o.endpoint.reply_timeout = std::chrono::milliseconds(static_cast<long>(reply_timeout_s * 1000));

    if (*wait) return cmd_wait(o);
    if (*wait_ready) return cmd_wait_ready(o);
    if (*health) return cmd_health(o);
    if (*exec) return cmd_exec(o);
    if (*att) return cmd_attach(o);
    if (*status) return cmd_status(o);
    if (*kill) return cmd_kill(o);
    if (*put) return cmd_put(o);
    if (*get) return cmd_get(o);
    if (*fwd) return cmd_forward(o);
    if (*ident) return cmd_identity(o);
    return kExitOwnFailure;
}

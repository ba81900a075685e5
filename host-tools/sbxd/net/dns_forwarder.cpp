#include "host-tools/sbxd/net/dns_forwarder.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string_view>
#include <thread>

#include "base/child_spawn.hpp"
#include "base/log.hpp"
#include "base/unique_fd.hpp"

namespace sbx::sbxd::net {
namespace {

using namespace std::chrono_literals;

constexpr auto kStartTimeout = 10s;
constexpr auto kStopGrace = 2s;
constexpr auto kPoll = 20ms;
constexpr std::size_t kLogTail = 2048;

Error dns_error(std::string message) {
    return Error{std::move(message), 0, "dns_forwarder"};
}

// Up to `max` bytes of a file from `offset` on, read to its end (a /proc
// file's size says 0).
std::optional<std::string> read_part(const std::string& path, off_t offset, std::size_t max) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        return std::nullopt;
    }
    std::string data(max, '\0');
    std::size_t done = 0;
    while (done < max) {
        const ssize_t n =
            ::pread(fd.get(), data.data() + done, max - done, offset + static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    data.resize(done);
    return data;
}

std::optional<pid_t> read_pid_file(const std::string& path) {
    auto text = read_part(path, 0, 64);
    if (!text) {
        return std::nullopt;
    }
    std::string_view s = *text;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
        s.remove_suffix(1);
    }
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), pid);
    if (ec != std::errc{} || end != s.data() + s.size() || pid <= 1) {
        return std::nullopt;
    }
    return pid;
}

// Whether process `pid` has `argument` in its command line.
bool has_argument(pid_t pid, std::string_view argument) {
    auto cmdline = read_part(fmt::format("/proc/{}/cmdline", pid), 0, 1 << 16);
    if (!cmdline) {
        return false;
    }
    std::string_view rest = *cmdline;
    while (!rest.empty()) {
        const auto end = rest.find('\0');
        if (rest.substr(0, end) == argument) {
            return true;
        }
        rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    }
    return false;
}

bool process_exists(pid_t pid) {
    return ::kill(pid, 0) == 0 || errno == EPERM;
}

// Stops the dnsmasq an earlier sbxd left running: the process in the pid
// file, if its command line names that pid file (so a reused pid is left
// alone). Not our child: it is gone when /proc says so.
void stop_stale(const DnsConfig& config) {
    auto pid = read_pid_file(config.pid_file());
    if (!pid || !has_argument(*pid, "--pid-file=" + config.pid_file())) {
        return;
    }
    log::info("stopping the DNS forwarder an earlier sbxd left (pid {})", *pid);
    ::kill(*pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
    while (process_exists(*pid) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(kPoll);
    }
    if (process_exists(*pid)) {
        ::kill(*pid, SIGKILL);
        for (int i = 0; i < 50 && process_exists(*pid); ++i) {
            std::this_thread::sleep_for(kPoll);
        }
    }
}

off_t file_size(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

// What the log has from `offset` on: its last kLogTail bytes at most.
std::string log_since(const std::string& path, off_t offset) {
    const off_t size = file_size(path);
    const off_t from = std::max(offset, size - static_cast<off_t>(kLogTail));
    auto text = read_part(path, from, kLogTail);
    if (!text || text->empty()) {
        return "(nothing in its log)";
    }
    std::string tail = from > offset ? "..." + *text : *text;
    while (!tail.empty() && tail.back() == '\n') {
        tail.pop_back();
    }
    return tail;
}

// Its own session (base/child_spawn.hpp): a terminal's signals to sbxd do
// not reach it, and its TCP helpers (dnsmasq forks one per TCP connection)
// share its group.
Result<pid_t> spawn(const DnsConfig& config) {
    auto pid = spawn_session_leader(config.program, dnsmasq_arguments(config), config.log_file());
    if (!pid) {
        return Error{fmt::format("cannot start {} (install dnsmasq-base)", config.program),
                     pid.error().errno_value, "dns_forwarder"};
    }
    return pid;
}

// SIGTERM to its group, SIGKILL after the grace period; reaps it.
void stop_child(pid_t pid) {
    ::kill(-pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) {
            return;
        }
        std::this_thread::sleep_for(kPoll);
    }
    ::kill(-pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) {
        return fmt::format("exit status {}", WEXITSTATUS(status));
    }
    if (WIFSIGNALED(status)) {
        return fmt::format("signal {}", WTERMSIG(status));
    }
    return "an unknown end";
}

}  // namespace

std::vector<std::string> dnsmasq_arguments(const DnsConfig& config) {
    std::vector<std::string> args = {
        "--keep-in-foreground",   // sbxd's child: it reaps it, stops it, may restart it
        "--conf-file=/dev/null",  // not /etc/dnsmasq.conf nor /etc/dnsmasq.d: nothing of the host's
        "--no-hosts",             // not the host's /etc/hosts either
        // Only the sandbox gateways: --bind-dynamic binds each address of a
        // matching interface as it appears (a tap made later included) and
        // lets other DNS servers on the host keep port 53 elsewhere.
        "--bind-dynamic", fmt::format("--interface={}*", kInterfacePrefix),
        "--except-interface=lo",  // --interface adds the loopback implicitly
        // No private address (RFC 1918, loopback, link-local, CGNAT...) in an
        // answer from upstream: a public name cannot point a sandbox at the
        // host's network (DNS rebinding). --rebind-localhost-ok stays off.
        "--stop-dns-rebind",
        "--domain-needed",  // names without a dot are not sent upstream
        "--bogus-priv",     // reverse lookups of private ranges answered here (RFC 6303)
        "--filter-AAAA",    // sandboxes have IPv4 only (docs/network.md)
        "--pid-file=" + config.pid_file(),
        "--log-facility=-",  // stderr, which is dnsmasq.log
    };
    if (config.upstreams.empty()) {
        args.push_back("--resolv-file=" + config.resolv_file);  // polled: changes are picked up
    } else {
        args.emplace_back("--no-resolv");
        for (auto upstream : config.upstreams) {
            args.push_back("--server=" + format_ipv4(upstream));
        }
    }
    if (config.log_queries) {
        args.emplace_back("--log-queries");
    }
    for (const auto& domain : config.rebind_ok_domains) {
        args.push_back(fmt::format("--rebind-domain-ok=/{}/", domain));
    }
    return args;
}

Result<DnsForwarder> DnsForwarder::start(DnsConfig config) {
    for (const auto& domain : config.rebind_ok_domains) {
        if (domain.empty() ||
            domain.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") != std::string::npos) {
            return make_coded_error("bad_request", "\"{}\" is not a lower-case domain name", domain);
        }
    }
    std::error_code ec;
    std::filesystem::create_directories(config.state_dir, ec);
    if (ec) {
        return dns_error(fmt::format("cannot make {}: {}", config.state_dir, ec.message()));
    }
    if (::access(config.program.c_str(), X_OK) != 0) {
        return Error{fmt::format("{} is not there (install dnsmasq-base)", config.program), errno,
                     "dns_forwarder"};
    }
    stop_stale(config);
    ::unlink(config.pid_file().c_str());
    const off_t log_start = file_size(config.log_file());
    auto pid = spawn(config);
    if (!pid) {
        return pid.error();
    }
    DnsForwarder forwarder(std::move(config), *pid);
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (true) {
        int status = 0;
        if (::waitpid(*pid, &status, WNOHANG) == *pid) {
            forwarder.pid_ = -1;
            return dns_error(fmt::format("dnsmasq ended at start ({}): {}", describe_status(status),
                                         log_since(forwarder.config_.log_file(), log_start)));
        }
        if (read_pid_file(forwarder.config_.pid_file()) == *pid) {
            return forwarder;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return dns_error(fmt::format("dnsmasq did not start within {} s: {}", kStartTimeout.count(),
                                         log_since(forwarder.config_.log_file(), log_start)));
        }
        std::this_thread::sleep_for(kPoll);
    }
}

DnsForwarder::DnsForwarder(DnsForwarder&& other) noexcept
    : config_(std::move(other.config_)), pid_(std::exchange(other.pid_, -1)) {}

DnsForwarder& DnsForwarder::operator=(DnsForwarder&& other) noexcept {
    if (this != &other) {
        stop();
        config_ = std::move(other.config_);
        pid_ = std::exchange(other.pid_, -1);
    }
    return *this;
}

DnsForwarder::~DnsForwarder() {
    stop();
}

bool DnsForwarder::running() {
    if (pid_ < 0) {
        return false;
    }
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
        log::warn("the DNS forwarder (dnsmasq, pid {}) ended: {}", pid_,
                  r == pid_ ? describe_status(status) : "not our child");
        pid_ = -1;
        return false;
    }
    return true;
}

Result<void> DnsForwarder::restart_if_exited() {
    if (running()) {
        return ok();
    }
    auto fresh = start(config_);
    if (!fresh) {
        return fresh.error();
    }
    pid_ = std::exchange(fresh->pid_, -1);
    return ok();
}

void DnsForwarder::stop() {
    if (pid_ < 0) {
        return;
    }
    stop_child(std::exchange(pid_, -1));
    ::unlink(config_.pid_file().c_str());
}

void DnsForwarder::release() {
    pid_ = -1;
}

}  // namespace sbx::sbxd::net

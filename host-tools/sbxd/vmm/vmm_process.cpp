#include "host-tools/sbxd/vmm/vmm_process.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "base/child_spawn.hpp"
#include "host-tools/sbxd/sandbox/process_identity.hpp"

namespace sbx::sbxd {

namespace {

ProcessEnd decode(int status) {
    ProcessEnd end;
    if (WIFEXITED(status)) {
        end.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        end.signal = WTERMSIG(status);
    }
    return end;
}

}  // namespace

Result<VmmProcess> spawn_process(const SpawnSpec& spec) {
    auto spawned = spec.cgroup_fd >= 0
                       ? spawn_session_leader_in_cgroup(spec.program, spec.args, spec.log_path, spec.cgroup_fd)
                       : spawn_session_leader(spec.program, spec.args, spec.log_path);
    if (!spawned) {
        return spawned.error();
    }
    const pid_t pid = *spawned;
    auto start = process_start_time(pid);
    if (!start) {
        // It ended before /proc could be read: reap it and say how.
        int status = 0;
        ::waitpid(pid, &status, 0);
        return make_error("{} ended at once ({})", spec.program, describe(decode(status)));
    }
    return VmmProcess{pid, *start, {}};
}

std::optional<ProcessEnd> poll_process_end(const VmmProcess& process) {
    if (process.pid <= 0) {
        return ProcessEnd{};
    }
    int status = 0;
    pid_t r = ::waitpid(static_cast<pid_t>(process.pid), &status, WNOHANG);
    if (r == process.pid) {
        return decode(status);
    }
    if (r == 0) {
        return std::nullopt;  // our child, running
    }
    // Not our child (adopted after a restart): /proc decides.
    if (is_same_process_alive(process)) {
        return std::nullopt;
    }
    return ProcessEnd{};
}

std::optional<ProcessEnd> wait_process_end(const VmmProcess& process, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (auto end = poll_process_end(process)) {
            return end;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return std::nullopt;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

void kill_process_group(const VmmProcess& process) {
    if (poll_process_end(process)) {
        return;
    }
    // The VMM leads its own group (POSIX_SPAWN_SETSID): one signal reaches
    // anything it started too.
    ::kill(-static_cast<pid_t>(process.pid), SIGKILL);
    (void)wait_process_end(process, std::chrono::seconds(10));
}

std::vector<FoundProcess> find_processes_with_argument(std::string_view flag, std::string_view prefix) {
    std::vector<FoundProcess> found;
    const uid_t me = ::getuid();
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) {
            continue;
        }
        struct stat st{};
        if (::stat(it->path().c_str(), &st) != 0 || st.st_uid != me) {
            continue;
        }
        std::ifstream in(it->path() / "cmdline", std::ios::binary);
        const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        // NUL-separated arguments (proc(5)).
        std::vector<std::string_view> args;
        for (std::size_t at = 0; at < cmdline.size();) {
            const std::size_t nul = cmdline.find('\0', at);
            const std::size_t stop = nul == std::string::npos ? cmdline.size() : nul;
            args.emplace_back(cmdline.data() + at, stop - at);
            at = stop + 1;
        }
        for (std::size_t i = 0; i + 1 < args.size(); ++i) {
            if (args[i] == flag && args[i + 1].starts_with(prefix)) {
                const auto pid = static_cast<pid_t>(std::stol(name));
                if (auto start = process_start_time(pid); start) {
                    found.push_back({VmmProcess{pid, *start, {}}, std::string(args[i + 1])});
                }
                break;
            }
        }
    }
    return found;
}

std::string describe(const ProcessEnd& end) {
    if (end.exit_code) {
        return fmt::format("exit code {}", *end.exit_code);
    }
    if (end.signal) {
        return fmt::format("signal {}", *end.signal);
    }
    return "ended";
}

}  // namespace sbx::sbxd

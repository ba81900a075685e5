#include "guest-agent/exec/spawn.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <unordered_map>

namespace sbx::agent {
namespace {

// Where the child's set-up failed, reported over the status pipe.
enum class Stage : int { Session, Terminal, Stdio, OomScore, Groups, Gid, Uid, Cwd };

struct SetupFailure {
    Stage stage;
    int err;
};

const char* stage_name(Stage stage) {
    switch (stage) {
        case Stage::Session:
            return "setsid";
        case Stage::Terminal:
            return "making the pty the controlling terminal";
        case Stage::Stdio:
            return "redirecting stdin/stdout/stderr";
        case Stage::OomScore:
            return "writing /proc/self/oom_score_adj";
        case Stage::Groups:
            return "setgroups";
        case Stage::Gid:
            return "setgid";
        case Stage::Uid:
            return "setuid";
        case Stage::Cwd:
            return "changing to the working directory";
    }
    return "setting up";
}

// Everything the child needs, prepared before it starts: the child shares
// the agent's memory until it execs (Reaper::start_child), so it reads this
// and writes only its own stack; it allocates nothing and calls no more
// than system calls.
struct ChildSetup {
    std::vector<char*> argv;
    std::vector<char*> envp;
    std::vector<std::string> candidates;  // program paths to try, in PATH order
    std::string not_found_message;
    std::string cannot_execute_message;
    const char* cwd = nullptr;
    const UserInfo* user = nullptr;
    bool switch_user = false;
    std::string oom_score_adj;  // empty: inherited
    int stdio[3] = {-1, -1, -1};
    int terminal = -1;  // the pty slave, to become the controlling terminal
    int status_pipe = -1;
};

[[noreturn]] void fail_setup(int status_pipe, Stage stage) {
    SetupFailure failure{stage, errno};
    [[maybe_unused]] auto n = ::write(status_pipe, &failure, sizeof failure);
    ::_exit(127);
}

void write_errno_digits(int err) {
    char digits[16];
    int n = 0;
    do {
        digits[sizeof digits - 1 - static_cast<std::size_t>(n++)] = static_cast<char>('0' + err % 10);
        err /= 10;
    } while (err > 0 && n < 15);
    [[maybe_unused]] auto w = ::write(2, digits + sizeof digits - n, static_cast<std::size_t>(n));
}

int run_child(void* arg) {
    const ChildSetup& s = *static_cast<const ChildSetup*>(arg);
    // Dispositions first, while every signal is still blocked (the parent
    // blocked them around the clone), then the mask.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
        ::sigaction(sig, &dfl, nullptr);  // SIGPIPE above all: the agent ignores it
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // The status pipe and stdio sources must not sit on 0..2 while 0..2 are
    // being replaced (an agent started with its stdio closed).
    const int status_pipe = ::fcntl(s.status_pipe, F_DUPFD_CLOEXEC, 3);
    int stdio[3];
    for (int i = 0; i < 3; ++i) {
        stdio[i] = ::fcntl(s.stdio[i], F_DUPFD_CLOEXEC, 3);
        if (stdio[i] < 0) {
            fail_setup(status_pipe, Stage::Stdio);
        }
    }
    if (::setsid() < 0) {
        fail_setup(status_pipe, Stage::Session);
    }
    if (s.terminal >= 0 && ::ioctl(s.terminal, TIOCSCTTY, 0) < 0) {
        fail_setup(status_pipe, Stage::Terminal);
    }
    for (int target = 0; target < 3; ++target) {
        if (::dup2(stdio[target], target) < 0) {
            fail_setup(status_pipe, Stage::Stdio);
        }
    }
    if (!s.oom_score_adj.empty()) {
        const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd < 0 || ::write(fd, s.oom_score_adj.data(), s.oom_score_adj.size()) < 0) {
            fail_setup(status_pipe, Stage::OomScore);
        }
        ::close(fd);
    }
    if (s.switch_user) {
        // Raw system calls: glibc's wrappers would make every thread of
        // the agent change its credentials too.
        if (::syscall(SYS_setgroups, s.user->groups.size(), s.user->groups.data()) < 0) {
            fail_setup(status_pipe, Stage::Groups);
        }
        if (::syscall(SYS_setgid, s.user->gid) < 0) {
            fail_setup(status_pipe, Stage::Gid);
        }
        if (::syscall(SYS_setuid, s.user->uid) < 0) {
            fail_setup(status_pipe, Stage::Uid);
        }
    }
    // After the user switch, so a directory the user may not enter fails.
    if (::chdir(s.cwd) < 0) {
        fail_setup(status_pipe, Stage::Cwd);
    }
    // Whatever the agent has open (other sessions' sockets, other
    // processes' pipes) must not leak into the program.
    ::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);

    int exec_errno = ENOENT;
    bool denied = false;
    for (const auto& path : s.candidates) {
        ::execve(path.c_str(), s.argv.data(), s.envp.data());
        exec_errno = errno;
        if (exec_errno == EACCES) {
            denied = true;  // as execvp: keep looking, report it if nothing else is found
        } else if (exec_errno != ENOENT && exec_errno != ENOTDIR && exec_errno != ESTALE) {
            break;
        }
    }
    if (denied && (exec_errno == ENOENT || exec_errno == ENOTDIR)) {
        exec_errno = EACCES;
    }
    if (exec_errno == ENOENT || exec_errno == ENOTDIR) {
        [[maybe_unused]] auto n = ::write(2, s.not_found_message.data(), s.not_found_message.size());
        ::_exit(127);
    }
    [[maybe_unused]] auto n = ::write(2, s.cannot_execute_message.data(), s.cannot_execute_message.size());
    write_errno_digits(exec_errno);
    [[maybe_unused]] auto nl = ::write(2, ")\n", 2);
    ::_exit(126);
}

// Later definitions of a variable replace earlier ones (getenv() would see
// the first).
std::vector<std::string> dedupe_env(const std::vector<std::string>& env) {
    std::vector<std::string> out;
    std::unordered_map<std::string_view, std::size_t> index;
    for (const auto& entry : env) {
        std::string_view key = std::string_view(entry).substr(0, entry.find('='));
        if (auto it = index.find(key); it != index.end()) {
            out[it->second] = entry;
        } else {
            index.emplace(key, out.size());
            out.push_back(entry);
        }
    }
    return out;
}

struct Pipe {
    UniqueFd read, write;
};

Result<Pipe> make_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) < 0) {
        return sys_error("pipe2");
    }
    return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Result<void> set_nonblocking(int fd) {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        return sys_error("fcntl O_NONBLOCK");
    }
    return ok();
}

struct Terminal {
    UniqueFd master, slave;
};

Result<Terminal> open_terminal(WindowSize size) {
    UniqueFd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!master) {
        return sys_error("opening a pseudo-terminal (/dev/ptmx)");
    }
    if (::grantpt(master.get()) < 0 || ::unlockpt(master.get()) < 0) {
        return sys_error("unlocking the pseudo-terminal");
    }
    char name[128];
    if (int err = ::ptsname_r(master.get(), name, sizeof name); err != 0) {
        return errno_error("ptsname_r", err);
    }
    auto slave = UniqueFd::open(name, O_RDWR | O_NOCTTY);
    if (!slave) {
        return slave.error();
    }
    if (auto r = resize_terminal(master.get(), size); !r) {
        return r.error();
    }
    return Terminal{std::move(master), std::move(*slave)};
}

}  // namespace

std::vector<std::string> program_candidates(const std::string& program, std::string_view path) {
    if (program.find('/') != std::string::npos) {
        return {program};
    }
    std::vector<std::string> out;
    while (true) {
        auto colon = path.find(':');
        std::string_view dir = path.substr(0, colon);
        out.push_back(fmt::format("{}/{}", dir.empty() ? "." : dir, program));  // "" means "." (POSIX)
        if (colon == std::string_view::npos) {
            return out;
        }
        path.remove_prefix(colon + 1);
    }
}

std::optional<std::string_view> env_value(const std::vector<std::string>& env, std::string_view key) {
    std::optional<std::string_view> value;
    for (const auto& entry : env) {
        std::string_view e = entry;
        if (e.size() > key.size() && e.starts_with(key) && e[key.size()] == '=') {
            value = e.substr(key.size() + 1);
        }
    }
    return value;
}

Result<void> resize_terminal(int terminal_fd, WindowSize size) {
    winsize ws{};
    ws.ws_row = size.rows;
    ws.ws_col = size.cols;
    if (::ioctl(terminal_fd, TIOCSWINSZ, &ws) < 0) {
        return sys_error("setting the terminal size");
    }
    return ok();
}

Result<SpawnedProcess> spawn(const SpawnPlan& plan) {
    if (plan.argv.empty() || plan.argv[0].empty()) {
        return make_error("no program to run");
    }
    SpawnedProcess process;
    ChildSetup setup;
    std::vector<std::string> env = dedupe_env(plan.env);
    auto argv = plan.argv;  // mutable copies: execve takes char*
    for (auto& a : argv) {
        setup.argv.push_back(a.data());
    }
    setup.argv.push_back(nullptr);
    for (auto& e : env) {
        setup.envp.push_back(e.data());
    }
    setup.envp.push_back(nullptr);
    setup.candidates = program_candidates(plan.argv[0], env_value(env, "PATH").value_or(""));
    setup.not_found_message = fmt::format("sbx-agent: {}: command not found\n", plan.argv[0]);
    setup.cannot_execute_message = fmt::format("sbx-agent: {}: cannot execute (errno ", plan.argv[0]);
    setup.cwd = plan.cwd.c_str();
    setup.user = &plan.user;
    // Only root may switch; a non-root agent (tests) runs things as itself.
    setup.switch_user = ::geteuid() == 0 || plan.user.uid != ::geteuid();
    if (plan.oom_score_adj) {
        setup.oom_score_adj = std::to_string(*plan.oom_score_adj);
    }

    // The child's ends, closed in the parent once it has started.
    UniqueFd child_in, child_out, child_err, child_terminal;
    if (plan.pty) {
        auto terminal = open_terminal(*plan.pty);
        if (!terminal) {
            return terminal.error();
        }
        process.out = std::move(terminal->master);
        process.terminal = UniqueFd(::fcntl(process.out.get(), F_DUPFD_CLOEXEC, 0));
        if (plan.stdin_pipe) {
            process.in = UniqueFd(::fcntl(process.out.get(), F_DUPFD_CLOEXEC, 0));
        }
        if (!process.terminal || (plan.stdin_pipe && !process.in)) {
            return sys_error("duplicating the terminal");
        }
        child_terminal = std::move(terminal->slave);
        setup.terminal = child_terminal.get();
        setup.stdio[0] = setup.stdio[1] = setup.stdio[2] = setup.terminal;
    } else {
        auto out = make_pipe();
        if (!out) {
            return out.error();
        }
        auto err = make_pipe();
        if (!err) {
            return err.error();
        }
        process.out = std::move(out->read);
        child_out = std::move(out->write);
        process.err = std::move(err->read);
        child_err = std::move(err->write);
        if (plan.stdin_pipe) {
            auto in = make_pipe();
            if (!in) {
                return in.error();
            }
            process.in = std::move(in->write);
            child_in = std::move(in->read);
        } else {
            auto null = UniqueFd::open("/dev/null", O_RDONLY);
            if (!null) {
                return null.error();
            }
            child_in = std::move(*null);
        }
        setup.stdio[0] = child_in.get();
        setup.stdio[1] = child_out.get();
        setup.stdio[2] = child_err.get();
    }
    for (int fd : {process.in.get(), process.out.get(), process.err.get()}) {
        if (fd >= 0) {
            if (auto r = set_nonblocking(fd); !r) {
                return r.error();
            }
        }
    }
    auto status_pipe = make_pipe();
    if (!status_pipe) {
        return status_pipe.error();
    }
    setup.status_pipe = status_pipe->write.get();

    Reaper& reaper = Reaper::instance();
    auto child = reaper.start_child(run_child, &setup);
    if (!child) {
        return child.error();
    }
    process.child = std::move(*child);
    status_pipe->write.reset();
    child_in.reset();
    child_out.reset();
    child_err.reset();
    child_terminal.reset();

    // The status pipe closes on exec (close-on-exec) or carries the failure.
    SetupFailure failure{};
    ssize_t n = 0;
    do {
        n = ::read(status_pipe->read.get(), &failure, sizeof failure);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof failure)) {
        process.child->wait();
        if (failure.stage == Stage::Cwd) {
            return errno_error(fmt::format("working directory {}", plan.cwd), failure.err);
        }
        return errno_error(fmt::format("{} for user {}", stage_name(failure.stage), plan.user.name),
                           failure.err);
    }
    if (plan.timeout.count() > 0) {
        reaper.kill_at(std::chrono::steady_clock::now() + plan.timeout, process.child);
    }
    return process;
}

}  // namespace sbx::agent

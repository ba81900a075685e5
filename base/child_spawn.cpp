#include "base/child_spawn.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>

#include "base/unique_fd.hpp"

extern char** environ;  // NOLINT: posix_spawn's environment

namespace sbx {

SpawnAttributes::SpawnAttributes() {
    posix_spawnattr_init(&attr_);
    posix_spawn_file_actions_init(&actions_);
}

SpawnAttributes::~SpawnAttributes() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
}

namespace {

// PROGRAM, ARGS and a null: the argv of posix_spawn and execve, whose
// signatures take char* const*.
std::vector<char*> argv_of(const std::string& program, const std::vector<std::string>& args) {
    std::vector<char*> argv;
    argv.reserve(args.size() + 2);
    argv.push_back(const_cast<char*>(program.c_str()));  // NOLINT: the exec family's signature
    for (const auto& arg : args) {
        argv.push_back(const_cast<char*>(arg.c_str()));  // NOLINT: the exec family's signature
    }
    argv.push_back(nullptr);
    return argv;
}

}  // namespace

Result<pid_t> spawn_session_leader(const std::string& program, const std::vector<std::string>& args,
                                   const std::string& log_path) {
    std::vector<char*> argv = argv_of(program, args);

    SpawnAttributes s;
    sigset_t none;
    sigemptyset(&none);
    sigset_t defaults;
    sigfillset(&defaults);
    posix_spawnattr_setsigmask(s.attr(), &none);
    posix_spawnattr_setsigdefault(s.attr(), &defaults);
    posix_spawnattr_setflags(s.attr(), POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawn_file_actions_addopen(s.actions(), 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(s.actions(), 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(s.actions(), 1, 2);
    posix_spawn_file_actions_addclosefrom_np(s.actions(), 3);

    pid_t pid = -1;
    if (int err = posix_spawn(&pid, program.c_str(), s.actions(), s.attr(), argv.data(), environ); err != 0) {
        return errno_error("starting " + program, err);
    }
    return pid;
}

namespace {

// The child's side of spawn_session_leader_in_cgroup, between clone3 and
// execve: a copy of one thread of a possibly multi-threaded parent, so only
// async-signal-safe calls (signal-safety(7)), no allocation.
[[noreturn]] void exec_child(const char* program, char* const* argv, const char* log_path, int error_fd) {
    ::setsid();
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
        if (sig != SIGKILL && sig != SIGSTOP) {
            ::sigaction(sig, &dfl, nullptr);
        }
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int in = ::open("/dev/null", O_RDONLY);
    int out = ::open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0 && out >= 0 && ::dup2(in, 0) == 0 && ::dup2(out, 1) == 1 && ::dup2(1, 2) == 2 &&
        ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) {
        ::execve(program, argv, environ);
    }
    const int err = errno;
    (void)!::write(error_fd, &err, sizeof err);
    ::_exit(127);
}

}  // namespace

Result<pid_t> spawn_session_leader_in_cgroup(const std::string& program, const std::vector<std::string>& args,
                                             const std::string& log_path, int cgroup_fd) {
    std::vector<char*> argv = argv_of(program, args);
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
        return sys_error("starting {}: pipe2", program);
    }
    UniqueFd read_end(pipe_fds[0]);
    UniqueFd write_end(pipe_fds[1]);

    struct clone_args ca {};
    ca.flags = CLONE_INTO_CGROUP;
    ca.exit_signal = SIGCHLD;
    ca.cgroup = static_cast<std::uint64_t>(cgroup_fd);
    const long pid = ::syscall(SYS_clone3, &ca, sizeof ca);
    if (pid < 0) {
        return sys_error("starting {} in a cgroup (clone3)", program);
    }
    if (pid == 0) {
        exec_child(program.c_str(), argv.data(), log_path.c_str(), write_end.get());
    }
    write_end.reset();
    int err = 0;
    ssize_t n;
    do {
        n = ::read(read_end.get(), &err, sizeof err);
    } while (n < 0 && errno == EINTR);
    if (n == sizeof err) {
        ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
        return errno_error("starting " + program, err);
    }
    return static_cast<pid_t>(pid);
}

}  // namespace sbx

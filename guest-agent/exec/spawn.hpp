// Starting processes for exec (docs/agent-protocol.md, "exec"): fork and
// exec with a user, groups, environment, working directory, a session of
// their own, and pipes or a pseudo-terminal; and reaping them.
//
// Reaping: one process-wide reaper thread waits for every child of the
// process (waitid(P_ALL)) and routes each exit to the Child it belongs to.
// A child is registered under the registry lock held across fork(), so no
// exit can arrive for a pid the reaper does not know. The process is made
// a child subreaper (PR_SET_CHILD_SUBREAPER): grandchildren whose parents
// exit (a detached command's daemons) are re-parented to the agent rather
// than escaping to init, and the reaper collects them too. Nothing else in
// the process may wait for children once the first spawn has happened.
//
// The process must ignore SIGPIPE (sbx-agent's main does): writes to a
// child's stdin that has gone away fail with EPIPE instead.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "guest-agent/exec/passwd.hpp"

namespace sbx::agent {

// How a process ended, as exec's exit message reports it.
struct ExitStatus {
    std::optional<int> code;    // exited normally
    std::optional<int> signal;  // killed by this signal
    bool timed_out = false;     // the signal was exec's timeout
};

// A spawned process and the group it leads.
class Child {
public:
    explicit Child(pid_t pid);

    [[nodiscard]] pid_t pid() const { return pid_; }
    // Sends `sig` to the process group, unless the leader has been reaped:
    // its number may then belong to a new process. Returns false then.
    bool signal_group(int sig);
    // exec's timeout: SIGKILL to the group, remembered for the exit report.
    void kill_for_timeout();

    // An eventfd that becomes readable once the process has been reaped.
    [[nodiscard]] int exited_fd() const { return exited_.get(); }
    [[nodiscard]] std::optional<ExitStatus> exit_status() const;
    [[nodiscard]] bool running() const { return !exit_status().has_value(); }
    void wait() const;

    // Called by the reaper: collects the zombie and publishes its status.
    void reap();

private:
    const pid_t pid_;
    UniqueFd exited_;
    mutable std::mutex mutex_;
    mutable std::condition_variable exited_cv_;
    std::optional<int> wait_status_;
    bool timed_out_ = false;
};

struct WindowSize {
    std::uint16_t rows = 24;
    std::uint16_t cols = 80;
};

struct SpawnPlan {
    std::vector<std::string> argv;  // argv[0] is looked up in env's PATH unless it has a '/'
    std::vector<std::string> env;   // "KEY=VALUE", later entries win
    std::string cwd;
    UserInfo user;
    bool stdin_pipe = false;          // false: stdin is /dev/null
    std::optional<WindowSize> pty;    // run on a new pseudo-terminal of this size
    std::chrono::milliseconds timeout{0};  // 0: none
};

// A started process and the agent's ends of its standard streams.
struct SpawnedProcess {
    std::shared_ptr<Child> child;
    UniqueFd in;        // write end of stdin (with a pty: the terminal); only with stdin_pipe
    UniqueFd out;       // stdout (with a pty: the terminal, stdout and stderr in one)
    UniqueFd err;       // stderr; none with a pty
    UniqueFd terminal;  // with a pty: the master, for resizes
};

// Forks and execs. Failures to set the process up (the user, the working
// directory, the terminal) are Errors with their errno, and no process
// remains. A program that cannot be executed is not an Error: like a shell,
// the process writes "sbx-agent: NAME: command not found" (or the reason)
// to its stderr and exits with 127 (not found) or 126 (not executable).
// All returned fds are close-on-exec and non-blocking.
[[nodiscard]] Result<SpawnedProcess> spawn(const SpawnPlan& plan);

// Sets a terminal's size; the kernel sends SIGWINCH to its foreground group.
[[nodiscard]] Result<void> resize_terminal(int terminal_fd, WindowSize size);

// The value of KEY in a "KEY=VALUE" list (the last one wins), or nullopt.
[[nodiscard]] std::optional<std::string_view> env_value(const std::vector<std::string>& env, std::string_view key);

}  // namespace sbx::agent

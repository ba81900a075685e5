// Starting processes for exec (docs/agent-protocol.md, "exec"): fork and
// exec with a user, groups, environment, working directory, a session of
// their own, and pipes or a pseudo-terminal. Reaping is reaper.hpp's.
//
// The process must ignore SIGPIPE (sbx-agent's main does): writes to a
// child's stdin that has gone away fail with EPIPE instead.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "guest-agent/exec/passwd.hpp"
#include "guest-agent/exec/reaper.hpp"

namespace sbx::agent {

struct WindowSize {
    std::uint16_t rows = 24;
    std::uint16_t cols = 80;
};

struct SpawnPlan {
    std::vector<std::string> argv;  // argv[0] is looked up in env's PATH unless it has a '/'
    std::vector<std::string> env;   // "KEY=VALUE", later entries win
    std::string cwd;
    UserInfo user;
    bool stdin_pipe = false;               // false: stdin is /dev/null
    std::optional<WindowSize> pty;         // run on a new pseudo-terminal of this size
    std::chrono::milliseconds timeout{0};  // 0: none
    // Written to the child's /proc/self/oom_score_adj before the user
    // switch (proc(5)): the agent in a guest shields itself from the OOM
    // killer (-1000) and gives each program back what it started with, so
    // a program that exhausts the guest's memory is what the kernel kills.
    std::optional<int> oom_score_adj;
};

// A started process and the agent's ends of its standard streams.
struct SpawnedProcess {
    std::shared_ptr<Child> child;
    UniqueFd in;        // write end of stdin (with a pty: the terminal); only with stdin_pipe
    UniqueFd out;       // stdout (with a pty: the terminal, stdout and stderr in one)
    UniqueFd err;       // stderr; none with a pty
    UniqueFd terminal;  // with a pty: the master, for resizes
};

// Starts the process (Reaper::start_child). Failures to set the process
// up (the user, the working directory, the terminal) are Errors with their
// errno, and no process remains. A program that cannot be executed is not an Error: like a shell,
// the process writes "sbx-agent: NAME: command not found" (or the reason)
// to its stderr and exits with 127 (not found) or 126 (not executable).
// All returned fds are close-on-exec and non-blocking.
[[nodiscard]] Result<SpawnedProcess> spawn(const SpawnPlan& plan);

// Sets a terminal's size; the kernel sends SIGWINCH to its foreground group.
[[nodiscard]] Result<void> resize_terminal(int terminal_fd, WindowSize size);

// Where execve is tried for `program`, in order: itself when it has a '/',
// else each directory of `path` (a PATH value; an empty entry is ".").
[[nodiscard]] std::vector<std::string> program_candidates(const std::string& program, std::string_view path);

// The value of KEY in a "KEY=VALUE" list (the last one wins), or nullopt.
[[nodiscard]] std::optional<std::string_view> env_value(const std::vector<std::string>& env,
                                                        std::string_view key);

}  // namespace sbx::agent

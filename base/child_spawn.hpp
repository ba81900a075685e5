// Starting a long-lived child with posix_spawn(3): the RAII owner of the
// two attribute objects, and the one setup sbxd's children share (a
// session of its own, a log file, no inherited fds or signal state).
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.hpp"

namespace sbx {

// RAII for posix_spawnattr_t and posix_spawn_file_actions_t.
class SpawnAttributes {
public:
    SpawnAttributes();
    ~SpawnAttributes();
    SpawnAttributes(const SpawnAttributes&) = delete;
    SpawnAttributes& operator=(const SpawnAttributes&) = delete;

    [[nodiscard]] posix_spawnattr_t* attr() { return &attr_; }
    [[nodiscard]] posix_spawn_file_actions_t* actions() { return &actions_; }

private:
    posix_spawnattr_t attr_{};
    posix_spawn_file_actions_t actions_{};
};

// Starts PROGRAM (a path, not searched on PATH) with ARGS (argv[1..]) and
// this process's environment as the leader of a new session and process
// group (POSIX_SPAWN_SETSID: a terminal's or the parent's group's signals
// do not reach it, and one kill(-pid) reaches what it starts), with an
// empty signal mask and every signal at its default disposition (a parent
// that ignores SIGPIPE does not pass that on), stdin /dev/null, stdout and
// stderr appended to LOG_PATH (created 0600) and no other fd. The error
// carries posix_spawn's errno.
[[nodiscard]] Result<pid_t> spawn_session_leader(const std::string& program, const std::vector<std::string>& args,
                                                 const std::string& log_path);

// The same, started inside the cgroup v2 directory open as `cgroup_fd`
// (clone3(2) with CLONE_INTO_CGROUP, Linux 5.7): the child is counted
// there from its first instruction, before it can allocate or spawn.
// The child then sets up what posix_spawn's attributes above would and
// reports a failed execve through a close-on-exec pipe.
[[nodiscard]] Result<pid_t> spawn_session_leader_in_cgroup(const std::string& program,
                                                           const std::vector<std::string>& args,
                                                           const std::string& log_path, int cgroup_fd);

}  // namespace sbx

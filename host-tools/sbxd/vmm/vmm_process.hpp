// One sbx-vmm process as sbxd sees it: spawned in its own session (so it
// is its own process group and outlives sbxd), recognised again after a
// restart by pid and start time (sandbox/process_identity.hpp), stopped
// by a signal to its group. Works the same for a child of this sbxd and
// for one adopted from an earlier sbxd (waitpid then reports ECHILD and
// /proc decides).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

struct SpawnSpec {
    std::string program;
    std::vector<std::string> args;  // without argv[0]
    std::string log_path;           // stdout and stderr, appended; stdin is /dev/null
    int cgroup_fd = -1;             // started inside that cgroup v2 (CLONE_INTO_CGROUP)
};

// posix_spawn with POSIX_SPAWN_SETSID, default signal dispositions and an
// empty signal mask, and no fd of sbxd's but 0-2. The VmmProcess has the
// pid and start time; its control_socket is left for the caller.
[[nodiscard]] Result<VmmProcess> spawn_process(const SpawnSpec& spec);

// How a process ended, when this sbxd saw it end (its own child).
struct ProcessEnd {
    std::optional<int> exit_code;  // exited normally
    std::optional<int> signal;     // killed by a signal
};

// nullopt while the process runs; once it has ended (a zombie child is
// reaped here), how, as far as this sbxd can know.
[[nodiscard]] std::optional<ProcessEnd> poll_process_end(const VmmProcess& process);

// Waits up to `timeout` for the process to end.
[[nodiscard]] std::optional<ProcessEnd> wait_process_end(const VmmProcess& process,
                                                         std::chrono::milliseconds timeout);

// SIGKILL to the process's group (it leads its own session), then waits
// for it to end. Nothing when it is already gone or the pid is another
// process now.
void kill_process_group(const VmmProcess& process);

// A process found by its command line.
struct FoundProcess {
    VmmProcess process;  // pid and start time; no control socket
    std::string value;   // the argument after the flag
};

// This user's processes whose command line (/proc/PID/cmdline) has `flag`
// followed by an argument that starts with `prefix`: after a restart, the
// VMMs an earlier sbxd started but did not live to record.
[[nodiscard]] std::vector<FoundProcess> find_processes_with_argument(std::string_view flag,
                                                                     std::string_view prefix);

// "exit code N", "signal N" or "ended" (an adopted process's end is not ours to see).
[[nodiscard]] std::string describe(const ProcessEnd& end);

}  // namespace sbx::sbxd

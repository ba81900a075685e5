// Recognising a VMM process again after sbxd restarts, without a pidfd
// that survived: a pid plus the process's start time (proc(5),
// /proc/PID/stat field 22, clock ticks since boot) names one process for
// the life of the host, since a recycled pid starts later.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "base/result.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

// Field 22 of /proc/PID/stat; "not_found" when there is no such process.
[[nodiscard]] Result<std::int64_t> process_start_time(pid_t pid);

// Whether the process recorded in `vmm` is still alive (a zombie counts as
// gone: it has exited and waits only to be reaped).
[[nodiscard]] bool is_same_process_alive(const VmmProcess& vmm);

}  // namespace sbx::sbxd

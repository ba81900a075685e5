// Why a sandbox's sbx-vmm ended on its own, for the "crashed" state event:
// its exit status (README, "Exit status") and the last error line of its
// log, vmm.log. A seccomp violation (status 6) also gives the system call
// number from the line sbx-vmm's SIGSYS reporter writes
// (host-tools/sbx-vmm/seccomp_policy.hpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "host-tools/sbxd/vmm/vmm_process.hpp"

namespace sbx::sbxd {

// sbx-vmm's exit status for a seccomp violation (kExitSeccomp there).
inline constexpr int kVmmExitSeccomp = 6;

struct VmmExitCause {
    std::string reason;  // seccomp, triple_fault, guest_panic, kvm_error, vmm_error, killed, vmm_exited
    std::string detail;  // the log's last "sbx-vmm: error:" line, else how the process ended
    std::optional<long> syscall;  // seccomp: the forbidden call's number
};

// `end` empty: an adopted VMM whose status this sbxd cannot see (the log
// still may say). `log_tail`: the end of vmm.log.
[[nodiscard]] VmmExitCause vmm_exit_cause(const std::optional<ProcessEnd>& end, std::string_view log_tail);

// The last `max_bytes` of the file at `path` (empty if unreadable).
[[nodiscard]] std::string read_log_tail(const std::string& path, std::size_t max_bytes = 16384);

}  // namespace sbx::sbxd

// Pieces shared by the exec and proc_* handlers.
#pragma once

#include <optional>

#include "guest-agent/agent/agent.hpp"
#include "guest-agent/exec/spawn.hpp"

namespace sbx::agent {

// {"code":C} or {"signal":S}, and "timed_out".
[[nodiscard]] Json exit_fields(const ExitStatus& status);

// Sends an error message for `error`: EAGAIN is "limit", EBUSY (a process
// still running) "bad_request", other errnos as code_for_errno(), no errno
// "bad_request". Long messages are cut to 4 KiB.
[[nodiscard]] Result<void> reply_error(Session& session, const Error& error);

// The "signal" field when it is a signal number (1 to NSIG-1).
[[nodiscard]] std::optional<int> valid_signal(const Json& message);

void register_proc_ops(OpTable& ops);

}  // namespace sbx::agent

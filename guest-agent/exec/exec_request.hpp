// An exec request (docs/agent-protocol.md, "exec") checked and turned
// into a SpawnPlan: the program, the user from /etc/passwd, the
// environment (fixed variables, then the env file, then the request's),
// the working directory.
#pragma once

#include "guest-agent/exec/spawn.hpp"
#include "guest-agent/protocol/messages.hpp"

namespace sbx::agent {

struct ExecSpec {
    SpawnPlan plan;
    bool detach = false;
    Json command;  // {"argv":[...]} or {"shell":"..."}, for proc_list
};

inline constexpr std::string_view kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
// The longest timeout accepted (about 31 years): later ones would overflow clocks.
inline constexpr std::int64_t kMaxTimeoutMs = 1'000'000'000'000;

// Errors without an errno are bad requests; an unknown user is ENOENT
// (not_found). A request without "user" runs as `default_user`.
[[nodiscard]] Result<ExecSpec> parse_exec_request(const Json& request, const std::string& env_file,
                                                  const AccountFiles& accounts = {},
                                                  const std::string& default_user = "root");

// "KEY=VALUE" lines; blank lines, lines starting with '#' and lines
// without a KEY= are skipped; the value is taken as is (no quotes). A
// missing file is an empty one.
[[nodiscard]] std::vector<std::string> read_env_file(const std::string& path);

}  // namespace sbx::agent

// An exec's request as both exec routes read it (docs/api.md, "Exec"):
// the JSON body of POST .../exec, and the first message of GET
// .../exec/ws (ws_exec.hpp), which has `tty` and no `stdin` or `detach`.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "guest-agent/exec/exec_client.hpp"

namespace sbx::sbxd {

struct ExecBody {
    agent::ExecRequest request;
    bool detach = false;
    nlohmann::json command;  // what the history shows: argv, or sh -c and the line
};

enum class ExecForm { Http, WebSocket };

// POST .../exec's body (ExecForm::Http).
[[nodiscard]] Result<ExecBody> parse_exec(std::string_view text);
// The fields both forms share: command or shell, env, cwd, user,
// timeoutMs; with ExecForm::Http stdin and detach too. Unknown fields are
// invalid_argument.
[[nodiscard]] Result<ExecBody> parse_exec_fields(nlohmann::json object, ExecForm form);

// {"type":"exit","exitCode":N|null,"signal"?:S,"timedOut"?:true}
[[nodiscard]] nlohmann::json exit_event(const agent::ExitInfo& exit);

// "TERM", "SIGTERM" or 15 (1 to 64); invalid_argument otherwise.
[[nodiscard]] Result<int> parse_signal(const nlohmann::json& value);

}  // namespace sbx::sbxd

// The sbx commands (docs/sbx.md), each over the routes of docs/api.md and
// the exec/process/file routes. main.cpp parses the flags; each command
// returns the process's exit status (output.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host-tools/sbx/api_requests.hpp"
#include "host-tools/sbx/desktop_actions.hpp"
#include "host-tools/sbx/http_client.hpp"
#include "host-tools/sbx/output.hpp"

namespace sbx::cli {

struct Context {
    HttpClient client;
    Output out;
};

// The JSON body of a 2xx reply, or why there is none.
class Outcome {
public:
    Outcome(Json body) : body_(std::move(body)) {}              // NOLINT(google-explicit-constructor)
    Outcome(Failure failure) : failure_(std::move(failure)) {}  // NOLINT(google-explicit-constructor)
    [[nodiscard]] bool ok() const { return !failure_; }
    [[nodiscard]] const Json& body() const { return body_; }
    [[nodiscard]] const Failure& failure() const { return *failure_; }

private:
    Json body_;
    std::optional<Failure> failure_;
};

// Sends a request and reads its JSON reply.
[[nodiscard]] Outcome call(const Context& ctx, const HttpRequest& request);
// The failure as the user should see it: with a hint where one helps
// (an unreachable daemon, a missing API key).
[[nodiscard]] Failure explained(const Context& ctx, Failure failure);
// An HTTP GET/POST/DELETE request with a JSON body (POST) or none.
[[nodiscard]] HttpRequest get(std::string target);
[[nodiscard]] HttpRequest post(std::string target, const Json& body);
[[nodiscard]] HttpRequest del(std::string target);

// commands_sandbox.cpp
struct NewCommand {
    CreateOptions create;
    std::string idempotency_key;
    bool no_ssh = false;  // --no-ssh: do not authorize sbx's ssh key in the new sandbox
};
int run_new(const Context& ctx, const NewCommand& command);
int run_ls(const Context& ctx, const std::vector<std::string>& labels,
           const std::vector<std::string>& states);
int run_info(const Context& ctx, const std::string& id);
int run_stop(const Context& ctx, const std::string& id, bool disk_only);
// `disk`: "" or a bigger root disk ("20", "20G").
int run_resume(const Context& ctx, const std::string& id, const std::string& size, const std::string& disk);
// `value`: seconds or a duration, or "off" / minutes, or "off".
int run_ttl(const Context& ctx, const std::string& id, const std::string& value);
int run_idle(const Context& ctx, const std::string& id, const std::string& value);
int run_egress(const Context& ctx, const std::string& id, const std::string& value);
int run_fork(const Context& ctx, const std::string& id, unsigned count, bool disk_only,
             const std::string& idempotency_key);
int run_rm(const Context& ctx, const std::vector<std::string>& ids, const std::vector<std::string>& labels,
           bool dry_run);
int run_history(const Context& ctx, const std::string& id);
int run_events(const Context& ctx, std::uint64_t after, bool follow);
int run_snapshot_create(const Context& ctx, const std::string& id, const std::string& name);
int run_snapshot_ls(const Context& ctx);
int run_snapshot_rm(const Context& ctx, const std::string& name);

// commands_keys.cpp: API keys (docs/api.md, "API keys").
int run_keys_create(const Context& ctx, const KeyOptions& options);
int run_keys_ls(const Context& ctx);
int run_keys_rm(const Context& ctx, const std::vector<std::string>& ids);

// commands_host.cpp: hosted ports, and sbxd's CA certificate (PEM).
struct HostCommand {
    std::string id;
    std::uint16_t port = 0;
    bool is_public = false;
    bool localhost = false;
};
int run_host(const Context& ctx, const HostCommand& command);
int run_host_ls(const Context& ctx, const std::string& id);  // id empty: every sandbox's
int run_unhost(const Context& ctx, const std::string& id, std::uint16_t port);
int run_ca(const Context& ctx);

// commands_desktop.cpp: the desktop (docs/api.md, "The desktop").
struct DesktopCommand {
    std::string id;
    // Empty: start it and print its link; `status`, `screenshot`, or an
    // action with its arguments (desktop_actions.hpp).
    std::vector<std::string> words;
    DesktopFlags flags;
    bool view_only = false;  // print the link that only shows
    std::optional<unsigned> display, width, height;
    std::string output;      // screenshot -o FILE (- for stdout)
    unsigned max_width = 0;  // screenshot --max-width N (0: full size)
};
int run_desktop(const Context& ctx, const DesktopCommand& command);

// commands_exec.cpp
struct ExecCommand {
    std::string id;
    ExecOptions exec;
    std::string status_process, attach_process;
    std::uint64_t offset = 0;
    bool no_stdin = false;
    bool tty = false;  // --tty: a pseudo-terminal, over the WebSocket
    bool raw_events = false;  // --json given: the events as they come, not the decoded bytes
};
int run_exec(const Context& ctx, ExecCommand command);
// exec's exit event, or an SSE exit's data -> our exit status: the
// command's code, 128+N for a signal, 124 for a timeout.
[[nodiscard]] int exit_status_of(const Json& exit);
// A failure of sbx itself while it stands in for a command: 125, so a
// script tells it from the command's own status.
int own_failure(const Context& ctx, Failure failure);

// commands_exec_ws.cpp: exec over the WebSocket, for --tty (a pty, raw
// mode, resizes) and for stdin streamed from a pipe.
int run_ws_exec(const Context& ctx, const ExecCommand& command, const Json& body);

// commands_files.cpp
// `recursive` (-r): a directory on either side is copied whole, as tar.
int run_scp(const Context& ctx, const std::string& from, const std::string& to, bool recursive);

// commands_logs.cpp
struct LogsCommand {
    std::string id;
    std::optional<std::uint64_t> tail;  // --tail BYTES: only the last ones at first
    bool follow = false;                // --follow: poll on until it stops or goes
    bool json = false;                  // --json given: JSON lines, not the raw bytes
};
int run_logs(const Context& ctx, const LogsCommand& command);

// commands_forward.cpp: TCP over sbxd's WebSockets (docs/api.md, "TCP over a WebSocket").
struct ForwardCommand {
    std::string id;
    std::string ports;     // LOCAL:REMOTE, or with --reverse REMOTE:LOCAL
    bool reverse = false;  // a host service (127.0.0.1:LOCAL) reachable in the guest at REMOTE
};
int run_forward(const Context& ctx, const ForwardCommand& command);
struct SshProxyCommand {
    std::string host;         // ID or ID.sbx (ssh's %h)
    std::uint16_t port = 22;  // --port
    bool authorize = true;    // --no-authorize: do not make sure sbx's key is in the guest first
};
int run_ssh_proxy(const Context& ctx, const SshProxyCommand& command);

// commands_mcp.cpp: an MCP server on stdio (docs/mcp.md).
struct McpCommand {
    std::string config;  // --config FILE; default $XDG_CONFIG_HOME/sandboxer/mcp.toml when it exists
    std::string size, ttl;
    std::optional<unsigned> idle_minutes;
    std::vector<std::string> labels;  // K=V, on every sandbox it makes
};
int run_mcp(const Context& ctx, const McpCommand& command, std::string_view version);

// commands_ssh.cpp
// sbx's ssh key (made on first use) in the guest's /root/.ssh/authorized_keys, once.
[[nodiscard]] Result<void> authorize_ssh_key(const Context& ctx, const std::string& id);
// Execs ssh with a ProxyCommand through `sbx ssh-proxy`.
int run_ssh(const Context& ctx, const std::string& id, const std::vector<std::string>& command);
// Prints the Host *.sbx stanza, or (install) appends it to ~/.ssh/config once.
int run_ssh_config(const Context& ctx, bool install);

}  // namespace sbx::cli

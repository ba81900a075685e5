// sbx-agent's shared state and its per-connection sessions
// (docs/agent-protocol.md). One thread serves one connection: the hello
// with the per-boot token, then requests one after another, each handled
// by the op registered under its name. An error from a handler becomes an
// error message and the session goes on; a broken frame ends the session.
// Nothing a client sends can stop the agent from serving the others.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/unique_fd.hpp"
#include "guest-agent/agent/door.hpp"
#include "guest-agent/protocol/frame_stream.hpp"

namespace sbx::agent {

class Agent;
class FreezeKernel;
class FreezeState;
class IdentityKernel;
class IdentityState;
class ProcessTable;

// Connects to a host service (vsock CID 2 in the guest, a Unix socket in
// tests): used for the ready announcement and reverse port forwards.
using HostConnector = std::function<Result<UniqueFd>(std::uint32_t port)>;

struct AgentOptions {
    std::string token;                            // empty: no authentication (logged loudly)
    DoorLimits limits;                            // hello deadline, session and pending bounds
    std::string env_file = "/etc/sandboxer/env";  // KEY=VALUE lines added to every exec
    // Who an exec runs as, and who owns what a file op creates, when the
    // request names no user (sbx-agent --default-user; the default image: user).
    std::string default_user = "root";
    HostConnector connect_host;                   // may be empty (no ready, no reverse forwards)
    // The RNG, vsock and network calls of the identity op; empty: the real
    // system calls (tests give a fake).
    std::shared_ptr<IdentityKernel> identity_kernel;
    // FIFREEZE/FITHAW for the freeze and thaw ops; empty: refused (only
    // the agent in a guest binds the real calls, main.cpp).
    std::shared_ptr<FreezeKernel> freeze_kernel;
    // Every program's oom_score_adj (SpawnPlan::oom_score_adj); none: the
    // agent's own. main.cpp sets the agent in a guest to -1000 and this to
    // the value it started with.
    std::optional<int> child_oom_score_adj;
    // Where the identity op keeps a token it was given, for the agent's next
    // start (keep_token, kept_token); empty: nowhere. main.cpp gives the
    // agent in a guest kTokenFile, on the guest's tmpfs.
    std::string token_file;
};

inline constexpr const char* kTokenFile = "/run/sandboxer/token";

// Writes `token` to `path` (mode 0600, its directory 0700 made if missing)
// so that no reader sees half of it.
[[nodiscard]] Result<void> keep_token(const std::string& path, const std::string& token);
// The token kept at `path`, if it is one the identity op would accept.
[[nodiscard]] std::optional<std::string> kept_token(const std::string& path);

class Session {
public:
    Session(Agent& agent, FrameStream& stream) : agent_(agent), stream_(stream) {}
    [[nodiscard]] Agent& agent() { return agent_; }
    [[nodiscard]] FrameStream& stream() { return stream_; }
    // An op that turned the connection into a raw byte stream (a port
    // forward) or otherwise consumed it marks the session finished.
    void finish() { finished_ = true; }
    [[nodiscard]] bool finished() const { return finished_; }

private:
    Agent& agent_;
    FrameStream& stream_;
    bool finished_ = false;
};

// An op handler: reads what else it needs from the session, writes its
// replies, and returns an Error (sent as an error message) on failure.
using OpHandler = std::function<Result<void>(Session&, const Json& request)>;
using OpTable = std::map<std::string, OpHandler, std::less<>>;

// Each area registers its ops (exec.cpp, files.cpp, tar.cpp, forward.cpp, health.cpp, identity_ops.cpp,
// freeze_ops.cpp, desktop_ops.cpp).
void register_exec_ops(OpTable& ops);
void register_file_ops(OpTable& ops);
void register_tar_ops(OpTable& ops);
void register_forward_ops(OpTable& ops);
void register_health_ops(OpTable& ops);
void register_identity_ops(OpTable& ops);
void register_freeze_ops(OpTable& ops);
void register_desktop_ops(OpTable& ops);

class Agent {
public:
    explicit Agent(AgentOptions options);
    ~Agent();

    // Serves one connection until the client closes it or framing breaks.
    void serve(UniqueFd connection);

    [[nodiscard]] const AgentOptions& options() const { return options_; }
    [[nodiscard]] const std::string& boot_id() const { return boot_id_; }
    [[nodiscard]] ProcessTable& processes() { return *processes_; }
    [[nodiscard]] IdentityState& identity() { return *identity_; }
    [[nodiscard]] FreezeState& freeze() { return *freeze_; }
    // The token, the hello deadline and the session bounds (the token
    // moves there: `options().token` is empty once the agent runs).
    [[nodiscard]] Door& door() { return door_; }
    // Authenticated sessions (connections still before their hello do not count).
    [[nodiscard]] std::size_t active_sessions() const { return door_.sessions(); }

private:
    // Returns false when the client may not go on (bad token or version,
    // no session free, or the door shut the connection).
    bool handshake(FrameStream& stream, Door::Ticket& ticket);

    AgentOptions options_;
    std::string boot_id_;
    OpTable ops_;
    std::unique_ptr<ProcessTable> processes_;
    std::unique_ptr<IdentityState> identity_;
    std::unique_ptr<FreezeState> freeze_;
    Door door_;
};

// The per-boot token from a kernel command line ("sbx.token=HEX"), or "".
[[nodiscard]] std::string token_from_cmdline(std::string_view cmdline);

}  // namespace sbx::agent

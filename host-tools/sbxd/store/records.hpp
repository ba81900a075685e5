// The rows sbxd keeps (store.hpp), as plain values. Times are Unix
// milliseconds (UTC); JSON-valued columns hold compact JSON text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "host-tools/sbxd/sandbox/state.hpp"

namespace sbx::sbxd {

using UnixMillis = std::int64_t;
using StringMap = std::map<std::string, std::string>;

// What sbxd needs to find a VMM again after its own restart without a
// pidfd: the pid, the process's start time (field 22 of /proc/PID/stat,
// so a recycled pid is not mistaken for it) and its control socket.
struct VmmProcess {
    std::int64_t pid = 0;
    std::int64_t start_time = 0;
    std::string control_socket;
    bool operator==(const VmmProcess&) const = default;
};

// A sandbox's place on the host's network (docs/network.md), kept for its
// whole life: its address slot (its tap and /30) and the guest's MAC.
struct SandboxNetwork {
    std::uint32_t slot = 0;
    std::string mac;  // "52:54:00:12:34:56"
    bool operator==(const SandboxNetwork&) const = default;
};

struct SandboxRecord {
    std::string id;
    std::string name;
    SandboxState state = SandboxState::Creating;
    std::string from;  // image or named snapshot it was made from
    std::string size;  // small/default/large/xlarge, or "custom"
    int cpus = 0;
    int memory_mib = 0;
    int disk_gib = 0;
    StringMap labels;
    StringMap env;
    bool no_env = false;
    UnixMillis created_at = 0;
    std::optional<UnixMillis> started_at;
    UnixMillis last_activity_at = 0;
    std::optional<UnixMillis> auto_stop_at;  // empty: no auto-stop
    std::optional<int> idle_minutes;         // empty: no idle pause
    std::optional<std::int64_t> ttl_seconds;  // the auto-stop's length; empty: no auto-stop
    std::optional<VmmProcess> vmm;
    std::optional<SandboxNetwork> network;  // empty: none (sbxd runs without one, or not yet given)
    // Its egress policy in net::format_egress's text: "internet",
    // "deny-all" or "allow:NET,...". Kept from the create on, network or not.
    std::string egress = "internet";
    bool operator==(const SandboxRecord&) const = default;
};

// A port of a sandbox served by sbxd's HTTPS proxy at
// https://<subdomain>-<port>.<domain> (docs/api.md, "Hosted ports").
struct HostedPortRecord {
    std::string sandbox_id;
    std::uint16_t port = 0;
    std::string subdomain;  // [a-z0-9]+, the same for every port of the sandbox
    std::string token;      // the secret a private URL asks for
    bool is_public = false;
    bool localhost = false;  // the app listens on the guest's 127.0.0.1: reached through the agent
    UnixMillis created_at = 0;
    bool operator==(const HostedPortRecord&) const = default;
};

// A sandbox's desktop as sbxd's proxy shows it (docs/api.md, "The
// desktop"): https://<subdomain>-desktop.<domain> (control) and
// https://<subdomain>-view.<domain> (view only), each with its own token,
// and the display the agent last started.
struct DesktopRecord {
    std::string sandbox_id;
    std::string subdomain;   // [a-z0-9]+, its own (not the hosted ports')
    std::string token;       // the control link's secret
    std::string view_token;  // the view-only link's
    int display = 1;
    std::uint16_t vnc_port = 5901;  // the VNC server's port on the guest's 127.0.0.1
    int width = 0, height = 0;
    UnixMillis created_at = 0;
    bool operator==(const DesktopRecord&) const = default;
};

struct ApiKeyRecord {
    std::string id;    // public, for listing and revoking
    std::string hash;  // hex SHA-256 of the key
    std::string name;
    std::optional<std::string> sandbox_id;  // empty: host-wide
    UnixMillis created_at = 0;
    bool read_only = false;                   // GET and HEAD only, no WebSocket
    std::optional<UnixMillis> expires_at = {};  // from then on the key is refused
    bool operator==(const ApiKeyRecord&) const = default;
};

struct SnapshotRecord {
    std::string name;
    std::string source_sandbox_id;  // may no longer exist
    bool has_memory = false;
    std::string from;  // the source's image
    int disk_gib = 0;
    UnixMillis created_at = 0;
    int cpus = 0;  // the machine its memory was saved from
    int memory_mib = 0;
    std::int64_t size_bytes = 0;  // its own files: the memory and its disk layer
    std::string cpu_signature{};  // the host CPU of the memory (vmm/cpu_signature.hpp); empty without memory
    bool operator==(const SnapshotRecord&) const = default;
};

struct ExecRecord {
    std::int64_t id = 0;
    std::string sandbox_id;
    std::string command;  // JSON array of argv
    UnixMillis started_at = 0;
    std::optional<int> exit_code;  // empty: still running or lost
    std::optional<std::string> key_id = {};  // the API key it came with; empty: the Unix socket
    bool operator==(const ExecRecord&) const = default;
};

struct EventRecord {
    std::int64_t id = 0;  // increasing; a client resumes after the last it saw
    std::optional<std::string> sandbox_id;
    std::string type;  // "state", "created", "deleted", ...
    std::string data;  // JSON object
    UnixMillis at = 0;
    bool operator==(const EventRecord&) const = default;
};

}  // namespace sbx::sbxd

// The /v1 request bodies and query strings as typed values, each parsed
// and checked in one place (docs/api.md lists the fields and their limits).
// Failures are coded errors: bad_request for a body that is not a JSON
// object, invalid_argument naming the field otherwise. Unknown fields are
// refused, so a misspelt option ("memoryMB") never silently does nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/api/sizes.hpp"
#include "host-tools/sbxd/net/egress_spec.hpp"
#include "host-tools/sbxd/sandbox/state.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd::api {

inline constexpr std::int64_t kDefaultTtlSeconds = 3600;          // product.md §2: 1 h
inline constexpr std::int64_t kMaxTtlSeconds = 30LL * 24 * 3600;  // up to 30 days
// API keys made through POST /v1/keys: a name for people, an expiry.
inline constexpr std::size_t kMaxKeyNameBytes = 128;
inline constexpr std::int64_t kMaxKeySeconds = 10LL * 366 * 24 * 3600;  // up to 10 years
inline constexpr std::int64_t kMinTtlSeconds = 60;
inline constexpr int kMaxIdleMinutes = 30 * 24 * 60;
inline constexpr int kMaxForkCount = 16;
inline constexpr std::size_t kMaxLabels = 32;
inline constexpr std::size_t kMaxEnvVars = 128;
inline constexpr std::size_t kMaxEnvBytes = 64 * 1024;

struct CreateRequest {
    std::optional<std::string> size;  // small/default/large/xlarge
    std::optional<int> cpus;
    std::optional<int> memory_mib;
    std::optional<int> disk_gib;
    std::optional<std::string> from;  // image or named snapshot; empty: the default image
    StringMap labels;
    StringMap env;
    bool no_env = false;
    std::optional<int> idle_minutes;          // 0 or absent: no idle pause
    std::optional<std::int64_t> ttl_seconds;  // absent: the default (unless no_auto_stop)
    bool no_auto_stop = false;
    bool cold = false;  // no warm template or memory snapshot: a cold boot
    net::Egress egress;  // docs/network.md, "Per-sandbox egress"
};

struct StopRequest {
    bool memory = true;
    // Set by sbxd's lifecycle timers (daemon/lifecycle.hpp), never by a
    // body: an idle pause ends paused, not stopped; the reason goes into
    // the state events (auto_stop, idle).
    bool idle_pause = false;
    std::string reason{};
};

struct ResumeRequest {
    std::optional<std::string> size;  // a new size: a cold boot
    std::string reason{};             // set by sbxd: "wake" for a request that woke a paused sandbox
    // A bigger disk, in GiB: a cold boot (resized) on a disk grown to it,
    // whose guest grows its file system at boot; not smaller than the disk.
    std::optional<int> disk_gib{};
};

struct ForkRequest {
    int count = 1;
    bool memory = true;
};

struct SnapshotRequest {
    std::string name;
};

// POST /v1/sandboxes/{id}/ttl: a new auto-stop from now, of ttl_seconds
// (absent: the sandbox's own length, else the default), or none.
struct TtlRequest {
    std::optional<std::int64_t> ttl_seconds;
    bool no_auto_stop = false;
};

// POST /v1/sandboxes/{id}/egress: the sandbox's new egress policy.
struct EgressRequest {
    net::Egress egress;
};

// POST /v1/sandboxes/{id}/idle: empty turns the idle pause off.
struct IdleRequest {
    std::optional<int> idle_minutes;
};

// POST /v1/keys: a new API key (docs/api.md, "API keys").
struct KeyCreateRequest {
    std::string name;
    std::optional<std::string> sandbox_id;  // none: host-wide
    bool read_only = false;
    std::optional<std::int64_t> expires_in_seconds;  // none: never expires
};

struct ListQuery {
    StringMap labels;
    std::vector<SandboxState> states;
};

// `min_ttl_seconds` is the shortest ttl allowed (kMinTtlSeconds; shorter
// only in tests, sbxd --min-ttl-seconds).
[[nodiscard]] Result<CreateRequest> parse_create(std::string_view body,
                                                 std::int64_t min_ttl_seconds = kMinTtlSeconds);
// Variables for /etc/sandboxer/env: shell names, not SANDBOXER_*, values
// without NUL or line breaks and not ending in a blank; bounded in count and size.
[[nodiscard]] Result<void> check_env(const StringMap& env);
[[nodiscard]] Result<StopRequest> parse_stop(std::string_view body);
[[nodiscard]] Result<ResumeRequest> parse_resume(std::string_view body);
[[nodiscard]] Result<ForkRequest> parse_fork(std::string_view body);
[[nodiscard]] Result<SnapshotRequest> parse_snapshot(std::string_view body);
// {"ttl": seconds} or {"noAutoStop": true}; {} renews with the sandbox's own length.
[[nodiscard]] Result<TtlRequest> parse_ttl(std::string_view body,
                                           std::int64_t min_ttl_seconds = kMinTtlSeconds);
// {"idleMinutes": N}; 0 or null turns it off. The field is required.
[[nodiscard]] Result<IdleRequest> parse_idle(std::string_view body);
// {"egress": "internet"|"deny-all"} or {"egress": "allow-list", "egressAllow": [networks]}.
[[nodiscard]] Result<EgressRequest> parse_egress_request(std::string_view body);
// {"name": "...", "sandboxId": "sbx_...", "readOnly": true, "expiresInSeconds": N}, all optional.
[[nodiscard]] Result<KeyCreateRequest> parse_key_create(std::string_view body);
// Query parameters, already percent-decoded: labels=k=v,k2=v2 (repeatable)
// and state=running,stopped (repeatable). Others are refused.
[[nodiscard]] Result<ListQuery> parse_list_query(
    const std::vector<std::pair<std::string, std::string>>& params);

// "90s", "30m", "2h30m", "7d": whole seconds.
[[nodiscard]] Result<std::int64_t> parse_duration(std::string_view text);

// Names of images and named snapshots: 1-63 of [a-z0-9._-], starting with
// a letter or digit.
[[nodiscard]] bool is_valid_name(std::string_view name);

// The machine a create asks for, on this host.
struct SandboxShape {
    std::string size;  // the size's name, or "custom" with cpus/memory overridden
    int cpus = 0;
    int memory_mib = 0;
    int disk_gib = 0;
    std::vector<std::string> warnings;  // e.g. scaled down to fit the host
};

// Sizes shrink to fit; explicit cpus/memoryMib/diskGib beyond the host are
// invalid_argument.
[[nodiscard]] Result<SandboxShape> resolve_shape(const CreateRequest& request, const HostLimits& host);

}  // namespace sbx::sbxd::api

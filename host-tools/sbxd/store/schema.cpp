#include "host-tools/sbxd/store/schema.hpp"

namespace sbx::sbxd {

namespace {

// Version 1. STRICT tables (SQLite 3.37): a value of the wrong type is an
// error rather than silently stored.
constexpr std::string_view kVersion1 = R"sql(
CREATE TABLE sandboxes (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    source TEXT NOT NULL,
    size TEXT NOT NULL,
    cpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    disk_gib INTEGER NOT NULL,
    labels TEXT NOT NULL,
    env TEXT NOT NULL,
    no_env INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    last_activity_at INTEGER NOT NULL,
    auto_stop_at INTEGER,
    idle_minutes INTEGER,
    vmm_pid INTEGER,
    vmm_start_time INTEGER,
    vmm_control_socket TEXT,
    CHECK ((vmm_pid IS NULL) = (vmm_start_time IS NULL) AND (vmm_pid IS NULL) = (vmm_control_socket IS NULL))
) STRICT;
CREATE INDEX sandboxes_by_state ON sandboxes(state);

CREATE TABLE idempotency_keys (
    key TEXT PRIMARY KEY,
    body_hash TEXT NOT NULL,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX idempotency_keys_by_sandbox ON idempotency_keys(sandbox_id);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    sandbox_id TEXT REFERENCES sandboxes(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX api_keys_by_sandbox ON api_keys(sandbox_id);

CREATE TABLE snapshots (
    name TEXT PRIMARY KEY,
    source_sandbox_id TEXT NOT NULL,
    has_memory INTEGER NOT NULL,
    source TEXT NOT NULL,
    disk_gib INTEGER NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE exec_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    command TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    exit_code INTEGER
) STRICT;
CREATE INDEX exec_history_by_sandbox ON exec_history(sandbox_id, started_at);

CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox_id TEXT,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    at INTEGER NOT NULL
) STRICT;
CREATE INDEX events_by_time ON events(at);
)sql";

// Version 2: Idempotency-Key on forks (docs/api.md). One row per child,
// so deleting a child drops it from a replay and deleting them all
// forgets the key, as deleting a created sandbox does.
constexpr std::string_view kVersion2 = R"sql(
CREATE TABLE fork_idempotency_keys (
    key TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (key, sandbox_id)
) STRICT;
CREATE INDEX fork_idempotency_keys_by_sandbox ON fork_idempotency_keys(sandbox_id);
)sql";

// Version 3: named snapshots keep their machine, size and the host CPU
// their memory was saved on (docs/sbxd.md, "Named snapshots").
constexpr std::string_view kVersion3 = R"sql(
ALTER TABLE snapshots ADD COLUMN cpus INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN memory_mib INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN size_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN cpu_signature TEXT NOT NULL DEFAULT '';
)sql";

// Version 4: the auto-stop's length, so that a renewal without one
// (POST /v1/sandboxes/{id}/ttl, docs/api.md) and a resume restart the same
// deadline; rows from before get the length their deadline implies.
constexpr std::string_view kVersion4 = R"sql(
ALTER TABLE sandboxes ADD COLUMN ttl_seconds INTEGER;
UPDATE sandboxes SET ttl_seconds = MAX(1, (auto_stop_at - COALESCE(started_at, created_at)) / 1000)
    WHERE auto_stop_at IS NOT NULL;
)sql";

// Version 5: the sandbox's network (docs/network.md): its address slot,
// unique among sandboxes, its MAC and its egress policy.
constexpr std::string_view kVersion5 = R"sql(
ALTER TABLE sandboxes ADD COLUMN net_slot INTEGER;
ALTER TABLE sandboxes ADD COLUMN net_mac TEXT;
ALTER TABLE sandboxes ADD COLUMN net_egress TEXT;
CREATE UNIQUE INDEX sandboxes_by_net_slot ON sandboxes(net_slot) WHERE net_slot IS NOT NULL;
)sql";

// Version 6: hosted ports (docs/api.md, "Hosted ports"): a sandbox's
// ports served at https://<subdomain>-<port>.<domain>; every port of a
// sandbox shares its subdomain; each has its own secret token.
constexpr std::string_view kVersion6 = R"sql(
CREATE TABLE hosted_ports (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    port INTEGER NOT NULL,
    subdomain TEXT NOT NULL,
    token TEXT NOT NULL,
    public INTEGER NOT NULL,
    localhost INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, port)
) STRICT;
CREATE UNIQUE INDEX hosted_ports_by_host ON hosted_ports(subdomain, port);
)sql";

// Version 7: key scopes (docs/sbxd.md, "API keys"): read-only keys and
// an expiry; the key each exec came with, for `sbx history`.
constexpr std::string_view kVersion7 = R"sql(
ALTER TABLE api_keys ADD COLUMN read_only INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;
ALTER TABLE exec_history ADD COLUMN key_id TEXT;
)sql";

// Version 8: desktops (docs/api.md, "The desktop"): a sandbox's desktop
// links at https://<subdomain>-desktop.<domain> and -view, a token each,
// and the display its agent started.
constexpr std::string_view kVersion8 = R"sql(
CREATE TABLE desktops (
    sandbox_id TEXT PRIMARY KEY REFERENCES sandboxes(id) ON DELETE CASCADE,
    subdomain TEXT NOT NULL UNIQUE,
    token TEXT NOT NULL,
    view_token TEXT NOT NULL,
    display INTEGER NOT NULL,
    vnc_port INTEGER NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
)sql";

constexpr std::string_view kMigrations[] = {kVersion1, kVersion2, kVersion3, kVersion4,
                                            kVersion5, kVersion6, kVersion7, kVersion8};

}  // namespace

std::span<const std::string_view> schema_migrations() {
    return kMigrations;
}

}  // namespace sbx::sbxd

// sbxd's state in one SQLite file (docs/sbxd.md, "Store"): sandboxes,
// idempotency keys, hashed API keys, named snapshots, exec history and
// events. Every change is one transaction, so a crash of sbxd at any
// point leaves either the state before the change or the state after it.
// The schema carries a version; opening runs the migrations a file lacks
// and refuses a file from a newer sbxd. Safe to share between threads
// (one connection behind a mutex); times are passed in, never read here.
//
// Error codes: "not_found", "invalid_state" (a transition the state
// machine forbids), "idempotency_conflict" (a key reused with another
// body), "already_exists", "store" (SQLite itself), "store_full" (its
// file system is full: state changes and deletes first use the room
// reserve beside the file, room_reserve.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "host-tools/sbxd/store/records.hpp"
#include "host-tools/sbxd/store/room_reserve.hpp"
#include "host-tools/sbxd/store/sqlite.hpp"

namespace sbx::sbxd {

// Idempotency keys are remembered this long (product.md §5).
inline constexpr UnixMillis kIdempotencyKeyLifetimeMs = 24LL * 3600 * 1000;
// Exec history is kept this long (product.md §3).
inline constexpr UnixMillis kExecHistoryLifetimeMs = 90LL * 24 * 3600 * 1000;
inline constexpr UnixMillis kEventLifetimeMs = 7LL * 24 * 3600 * 1000;

struct SandboxFilter {
    StringMap labels;                  // every pair must match
    std::vector<SandboxState> states;  // any of these; empty: all
};

struct IdempotencyClaim {
    std::string key;
    std::string body_hash;  // of the request body as the client sent it
};

struct CreateOutcome {
    SandboxRecord sandbox;
    bool replayed = false;  // an earlier create with the same key and body
    std::vector<std::string> warnings{};  // the driver's (e.g. a cold boot without a warm template)
    // From a named snapshot: whether its memory was restored, and if not
    // why (cold, cpu_mismatch, no_memory_snapshot, resized, restore_failed).
    std::optional<bool> memory_restored{};
    std::string start_reason{};
};

struct StateChange {
    SandboxState to;
    UnixMillis now = 0;
    // Set with the change (a create or resume that spawned a VMM); a
    // change to a state without a VMM clears it (sandbox/state.hpp has_vmm).
    std::optional<VmmProcess> vmm;
    std::string reason{};  // in the "state" event when set: auto_stop, idle, wake, or why a VMM ended
    std::string detail{};  // with a crash: the VMM's last error line (vmm/vmm_exit_cause.hpp)
    std::optional<long> syscall{};  // with reason seccomp: the forbidden system call
};

// A sandbox's auto-stop (product.md §2): the deadline and the length it
// was set with; both empty: off.
struct AutoStop {
    std::optional<UnixMillis> deadline;
    std::optional<std::int64_t> ttl_seconds;
};

class Store {
public:
    [[nodiscard]] static Result<std::unique_ptr<Store>> open(const std::string& path);

    [[nodiscard]] Result<int> schema_version();
    [[nodiscard]] static int latest_schema_version();

    // Sandboxes.
    // Inserts the sandbox (and a "created" event), or with a claim whose
    // key is already known: the same body replays the earlier sandbox, a
    // different one is "idempotency_conflict". Keys older than 24 h count
    // as unknown.
    [[nodiscard]] Result<CreateOutcome> create_sandbox(const SandboxRecord& sandbox,
                                                       const std::optional<IdempotencyClaim>& claim);
    // Read-only lookups of an Idempotency-Key before the work starts: the
    // earlier create's sandbox / fork's children (empty: the key is
    // unknown, expired or its sandboxes deleted), "idempotency_conflict"
    // for another body.
    [[nodiscard]] Result<std::optional<SandboxRecord>> find_create_claim(const IdempotencyClaim& claim,
                                                                         UnixMillis now);
    [[nodiscard]] Result<std::vector<SandboxRecord>> find_fork_claim(const IdempotencyClaim& claim,
                                                                     UnixMillis now);
    // Records a fork child under the fork's key.
    [[nodiscard]] Result<void> add_fork_child(const IdempotencyClaim& claim, const std::string& child_id,
                                              UnixMillis now);
    [[nodiscard]] Result<SandboxRecord> get_sandbox(const std::string& id);
    [[nodiscard]] Result<std::vector<SandboxRecord>> list_sandboxes(const SandboxFilter& filter);
    // Moves the sandbox to change.to if the state machine allows it from
    // the state it is in now (else "invalid_state"); records a "state" event.
    [[nodiscard]] Result<SandboxRecord> change_state(const std::string& id, const StateChange& change);
    [[nodiscard]] Result<void> touch(const std::string& id, UnixMillis now);
    // Each records an event ("auto_stop", "idle"); a new idle setting also
    // counts as activity.
    [[nodiscard]] Result<void> set_auto_stop(const std::string& id, const AutoStop& auto_stop,
                                             UnixMillis now);
    [[nodiscard]] Result<void> set_idle_minutes(const std::string& id, std::optional<int> minutes,
                                                UnixMillis now);
    // A resume with another shape (a cold boot): the new size name, vCPUs,
    // memory and disk (GiB; a disk only grows).
    [[nodiscard]] Result<void> set_shape(const std::string& id, const std::string& size, int cpus,
                                         int memory_mib, int disk_gib);
    // The sandbox's network (store_network.cpp): the one it has, or a new
    // one with the slot `pick` chooses from the slots every other sandbox
    // holds (sbxd passes net::allocate_slot) and `mac`, in one
    // transaction, so two sandboxes never hold one slot.
    using SlotPicker = std::function<Result<std::uint32_t>(const std::set<std::uint32_t>& used)>;
    [[nodiscard]] Result<SandboxNetwork> claim_network(const std::string& id, const SlotPicker& pick,
                                                       const std::string& mac, UnixMillis now);
    // A new egress policy (its text form), with an "egress" event.
    [[nodiscard]] Result<void> set_egress(const std::string& id, const std::string& egress, UnixMillis now);
    // Removes the row with its idempotency keys, scoped API keys and exec
    // history (named snapshots stay); records a "deleted" event.
    [[nodiscard]] Result<void> delete_sandbox(const std::string& id, UnixMillis now);

    // Hosted ports (store_hosted_ports.cpp). host_port adds the port, or
    // changes a hosted one's flags keeping its token; a sandbox's first
    // port takes `port.subdomain`, later ones the one it has. The rows go
    // with the sandbox.
    [[nodiscard]] Result<HostedPortRecord> host_port(const HostedPortRecord& port);
    // Every sandbox's when `sandbox_id` is empty; by sandbox and port.
    [[nodiscard]] Result<std::vector<HostedPortRecord>> list_hosted_ports(
        const std::optional<std::string>& sandbox_id);
    [[nodiscard]] Result<HostedPortRecord> find_hosted_port(std::string_view subdomain, std::uint16_t port);
    [[nodiscard]] Result<void> unhost_port(const std::string& sandbox_id, std::uint16_t port);

    // Desktops (store_desktops.cpp), one per sandbox, gone with it.
    // set_desktop adds it, or changes its display, port and size keeping
    // its subdomain, tokens and creation time; the row as stored.
    [[nodiscard]] Result<DesktopRecord> set_desktop(const DesktopRecord& desktop);
    [[nodiscard]] Result<std::optional<DesktopRecord>> get_desktop(const std::string& sandbox_id);
    // By the subdomain of its links: not_found when none.
    [[nodiscard]] Result<DesktopRecord> find_desktop(std::string_view subdomain);

    // API keys (only their hashes are stored).
    [[nodiscard]] Result<void> add_api_key(const ApiKeyRecord& key);
    [[nodiscard]] Result<std::optional<ApiKeyRecord>> find_api_key(const std::string& hash);
    [[nodiscard]] Result<std::vector<ApiKeyRecord>> list_api_keys();
    [[nodiscard]] Result<void> remove_api_key(const std::string& id);

    // Named snapshots.
    [[nodiscard]] Result<void> add_snapshot(const SnapshotRecord& snapshot);
    [[nodiscard]] Result<SnapshotRecord> get_snapshot(const std::string& name);
    [[nodiscard]] Result<std::vector<SnapshotRecord>> list_snapshots();
    [[nodiscard]] Result<void> remove_snapshot(const std::string& name);

    // Exec history; `key_id`: the API key the exec came with (none: the
    // Unix socket).
    [[nodiscard]] Result<std::int64_t> add_exec(const std::string& sandbox_id, const std::string& command,
                                                UnixMillis started_at,
                                                const std::optional<std::string>& key_id = std::nullopt);
    [[nodiscard]] Result<void> finish_exec(std::int64_t exec_id, int exit_code);
    [[nodiscard]] Result<std::vector<ExecRecord>> list_execs(const std::string& sandbox_id);

    // Events, oldest first, after the given id.
    [[nodiscard]] Result<std::vector<EventRecord>> list_events(std::int64_t after_id, int limit);

    // Drops idempotency keys (creates' and forks') past 24 h, exec history past 90 days and
    // events past 7 days; returns how many rows went.
    [[nodiscard]] Result<std::int64_t> prune(UnixMillis now);

    // The bytes kept free beside the database for its own writes.
    static constexpr std::uint64_t kRoomReserveBytes = 8ull << 20;
    [[nodiscard]] bool room_reserved() const { return room_.held(); }

private:
    Store(sqlite::Database db, RoomReserve room) : db_(std::move(db)), room_(std::move(room)) {}
    [[nodiscard]] Result<void> migrate();
    [[nodiscard]] Result<SandboxRecord> change_state_once(const std::string& id, const StateChange& change);
    [[nodiscard]] Result<void> delete_sandbox_once(const std::string& id, UnixMillis now);
    // fn() once more, after freeing the room reserve, when it failed with
    // "store_full"; the reserve is allocated again after a write that went
    // through.
    template <typename Fn>
    auto with_room(Fn&& fn) -> decltype(fn());
    bool use_room_reserve(const Error& error);
    void refill_room_reserve();
    [[nodiscard]] Result<std::optional<SandboxRecord>> find_sandbox_locked(const std::string& id);
    [[nodiscard]] Result<void> add_event_locked(const std::optional<std::string>& sandbox_id,
                                                std::string_view type, const std::string& data,
                                                UnixMillis at);
    [[nodiscard]] Result<void> update_one_locked(std::string_view sql, const std::string& id,
                                                 const std::optional<std::int64_t>& value);

    std::mutex mutex_;
    sqlite::Database db_;
    std::mutex room_mutex_;
    RoomReserve room_;
};

template <typename Fn>
auto Store::with_room(Fn&& fn) -> decltype(fn()) {
    auto result = fn();
    if (!result && use_room_reserve(result.error())) {
        result = fn();
    }
    if (result) {
        refill_room_reserve();
    }
    return result;
}

}  // namespace sbx::sbxd

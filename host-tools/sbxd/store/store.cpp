#include "host-tools/sbxd/store/store.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "base/log.hpp"
#include "host-tools/sbxd/store/schema.hpp"

namespace sbx::sbxd {

namespace {

using sqlite::Statement;
using sqlite::Transaction;

std::string encode_map(const StringMap& map) {
    return nlohmann::json(map).dump();
}

Result<StringMap> decode_map(const std::string& text, std::string_view column) {
    auto json = nlohmann::json::parse(text, nullptr, false);
    if (json.is_discarded() || !json.is_object()) {
        return make_coded_error("store", "column {} holds '{}', not a JSON object", column, text);
    }
    StringMap map;
    for (const auto& [key, value] : json.items()) {
        if (!value.is_string()) {
            return make_coded_error("store", "column {} has a non-string value for '{}'", column, key);
        }
        map.emplace(key, value.get<std::string>());
    }
    return map;
}

constexpr std::string_view kSandboxColumns =
    "id, name, state, source, size, cpus, memory_mib, disk_gib, labels, env, no_env, created_at, started_at, "
    "last_activity_at, auto_stop_at, idle_minutes, vmm_pid, vmm_start_time, vmm_control_socket, ttl_seconds, "
    "net_slot, net_mac, net_egress";

Result<SandboxRecord> read_sandbox(const Statement& row) {
    SandboxRecord s;
    s.id = row.text(0);
    s.name = row.text(1);
    auto state = parse_sandbox_state(row.text(2));
    if (!state) {
        return make_coded_error("store", "sandbox {} has unknown state '{}'", s.id, row.text(2));
    }
    s.state = *state;
    s.from = row.text(3);
    s.size = row.text(4);
    s.cpus = static_cast<int>(row.int64(5));
    s.memory_mib = static_cast<int>(row.int64(6));
    s.disk_gib = static_cast<int>(row.int64(7));
    auto labels = decode_map(row.text(8), "labels");
    if (!labels) {
        return labels.error();
    }
    s.labels = std::move(*labels);
    auto env = decode_map(row.text(9), "env");
    if (!env) {
        return env.error();
    }
    s.env = std::move(*env);
    s.no_env = row.int64(10) != 0;
    s.created_at = row.int64(11);
    s.started_at = row.optional_int64(12);
    s.last_activity_at = row.int64(13);
    s.auto_stop_at = row.optional_int64(14);
    if (auto idle = row.optional_int64(15)) {
        s.idle_minutes = static_cast<int>(*idle);
    }
    if (!row.is_null(16)) {
        s.vmm = VmmProcess{row.int64(16), row.int64(17), row.text(18)};
    }
    s.ttl_seconds = row.optional_int64(19);
    if (!row.is_null(20)) {
        s.network = SandboxNetwork{static_cast<std::uint32_t>(row.int64(20)), row.text(21)};
    }
    if (!row.is_null(22)) {
        s.egress = row.text(22);
    }
    return s;
}

bool matches(const SandboxRecord& s, const SandboxFilter& filter) {
    if (!filter.states.empty() &&
        std::find(filter.states.begin(), filter.states.end(), s.state) == filter.states.end()) {
        return false;
    }
    return std::all_of(filter.labels.begin(), filter.labels.end(), [&](const auto& pair) {
        auto it = s.labels.find(pair.first);
        return it != s.labels.end() && it->second == pair.second;
    });
}

Error not_found(std::string_view what, const std::string& id) {
    return make_coded_error("not_found", "no {} '{}'", what, id);
}

}  // namespace

Result<std::unique_ptr<Store>> Store::open(const std::string& path) {
    auto db = sqlite::Database::open(path);
    if (!db) {
        return db.error();
    }
    std::unique_ptr<Store> store(new Store(std::move(*db), RoomReserve(path + ".reserve", kRoomReserveBytes)));
    if (auto r = store->migrate(); !r) {
        return r.error().context(path);
    }
    if (auto r = store->room_.fill(); !r) {
        log::warn("the store's room reserve: {}", r.error().to_string());
    }
    return store;
}

bool Store::use_room_reserve(const Error& error) {
    if (error.code != sqlite::kStoreFull) {
        return false;
    }
    std::lock_guard lock(room_mutex_);
    if (!room_.release()) {
        return false;
    }
    log::warn("the store's file system is full; using the {} MiB kept at {}: {}", kRoomReserveBytes >> 20,
              room_.path(), error.to_string());
    return true;
}

void Store::refill_room_reserve() {
    std::lock_guard lock(room_mutex_);
    if (!room_.held()) {
        (void)room_.fill();  // again at the next write while there is no room
    }
}

int Store::latest_schema_version() {
    return static_cast<int>(schema_migrations().size());
}

Result<int> Store::schema_version() {
    std::lock_guard lock(mutex_);
    auto stmt = db_.prepare("SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
    if (!stmt) {
        return stmt.error();
    }
    if (auto row = stmt->step(); !row) {
        return row.error();
    }
    return static_cast<int>(stmt->int64(0));
}

Result<void> Store::migrate() {
    if (auto r = db_.exec("CREATE TABLE IF NOT EXISTS schema_migrations ("
                          "version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT");
        !r) {
        return r.error();
    }
    auto current = schema_version();
    if (!current) {
        return current.error();
    }
    const auto migrations = schema_migrations();
    if (*current > static_cast<int>(migrations.size())) {
        return make_coded_error("store", "schema version {} is newer than this sbxd's {}", *current,
                                migrations.size());
    }
    std::lock_guard lock(mutex_);
    for (auto version = static_cast<std::size_t>(*current) + 1; version <= migrations.size(); ++version) {
        auto tx = Transaction::begin(db_);
        if (!tx) {
            return tx.error();
        }
        if (auto r = db_.exec(std::string(migrations[version - 1])); !r) {
            return r.error().context(fmt::format("schema migration {}", version));
        }
        auto mark = db_.prepare(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, CAST(strftime('%s','now') AS "
            "INTEGER) * 1000)");
        if (!mark) {
            return mark.error();
        }
        if (auto r = mark->bind_all(static_cast<std::int64_t>(version)).run(); !r) {
            return r.error();
        }
        if (auto r = tx->commit(); !r) {
            return r.error();
        }
    }
    return ok();
}

Result<std::optional<SandboxRecord>> Store::find_sandbox_locked(const std::string& id) {
    auto stmt = db_.prepare(fmt::format("SELECT {} FROM sandboxes WHERE id = ?", kSandboxColumns));
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind_all(id);
    auto row = stmt->step();
    if (!row) {
        return row.error();
    }
    if (!*row) {
        return std::optional<SandboxRecord>();
    }
    auto sandbox = read_sandbox(*stmt);
    if (!sandbox) {
        return sandbox.error();
    }
    return std::optional<SandboxRecord>(std::move(*sandbox));
}

Result<void> Store::add_event_locked(const std::optional<std::string>& sandbox_id, std::string_view type,
                                     const std::string& data, UnixMillis at) {
    auto stmt = db_.prepare("INSERT INTO events (sandbox_id, type, data, at) VALUES (?, ?, ?, ?)");
    if (!stmt) {
        return stmt.error();
    }
    return stmt->bind_all(sandbox_id, type, data, at).run();
}

Result<CreateOutcome> Store::create_sandbox(const SandboxRecord& s,
                                            const std::optional<IdempotencyClaim>& claim) {
    std::lock_guard lock(mutex_);
    auto tx = Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    if (claim) {
        auto known = db_.prepare(
            "SELECT body_hash, sandbox_id FROM idempotency_keys WHERE key = ? AND created_at > ?");
        if (!known) {
            return known.error();
        }
        known->bind_all(claim->key, s.created_at - kIdempotencyKeyLifetimeMs);
        auto row = known->step();
        if (!row) {
            return row.error();
        }
        if (*row) {
            if (known->text(0) != claim->body_hash) {
                return make_coded_error("idempotency_conflict",
                                        "Idempotency-Key '{}' was used with a different request body",
                                        claim->key);
            }
            auto earlier = find_sandbox_locked(known->text(1));
            if (!earlier) {
                return earlier.error();
            }
            if (!*earlier) {
                return not_found("sandbox", known->text(1));
            }
            return CreateOutcome{std::move(**earlier), true};
        }
        // An expired key is forgotten here, in the same transaction.
        auto forget = db_.prepare("DELETE FROM idempotency_keys WHERE key = ?");
        if (!forget) {
            return forget.error();
        }
        if (auto r = forget->bind_all(claim->key).run(); !r) {
            return r.error();
        }
    }
    auto insert =
        db_.prepare(fmt::format("INSERT INTO sandboxes ({}) VALUES "
                                "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                kSandboxColumns));
    if (!insert) {
        return insert.error();
    }
    std::optional<std::int64_t> idle;
    if (s.idle_minutes) {
        idle = *s.idle_minutes;
    }
    insert->bind_all(s.id, s.name, to_string(s.state), s.from, s.size, std::int64_t{s.cpus},
                     std::int64_t{s.memory_mib}, std::int64_t{s.disk_gib}, encode_map(s.labels),
                     encode_map(s.env), std::int64_t{s.no_env}, s.created_at, s.started_at,
                     s.last_activity_at, s.auto_stop_at, idle);
    if (s.vmm) {
        insert->bind(17, s.vmm->pid)
            .bind(18, s.vmm->start_time)
            .bind(19, std::string_view(s.vmm->control_socket));
    } else {
        insert->bind(17, nullptr).bind(18, nullptr).bind(19, nullptr);
    }
    insert->bind(20, s.ttl_seconds);
    if (s.network) {
        insert->bind(21, std::int64_t{s.network->slot}).bind(22, std::string_view(s.network->mac));
    } else {
        insert->bind(21, nullptr).bind(22, nullptr);
    }
    insert->bind(23, std::string_view(s.egress));
    if (auto r = insert->run(); !r) {
        if (r.error().message.find("UNIQUE") != std::string::npos) {
            return make_coded_error("already_exists", "a sandbox with id '{}' exists", s.id);
        }
        return r.error();
    }
    if (claim) {
        auto remember = db_.prepare(
            "INSERT INTO idempotency_keys (key, body_hash, sandbox_id, created_at) VALUES (?, ?, ?, ?)");
        if (!remember) {
            return remember.error();
        }
        if (auto r = remember->bind_all(claim->key, claim->body_hash, s.id, s.created_at).run(); !r) {
            return r.error();
        }
    }
    auto event = nlohmann::json{{"state", to_string(s.state)}, {"from", s.from}}.dump();
    if (auto r = add_event_locked(s.id, "created", event, s.created_at); !r) {
        return r.error();
    }
    if (auto r = tx->commit(); !r) {
        return r.error();
    }
    return CreateOutcome{s, false};
}

Result<SandboxRecord> Store::get_sandbox(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto found = find_sandbox_locked(id);
    if (!found) {
        return found.error();
    }
    if (!*found) {
        return not_found("sandbox", id);
    }
    return std::move(**found);
}

Result<std::vector<SandboxRecord>> Store::list_sandboxes(const SandboxFilter& filter) {
    std::lock_guard lock(mutex_);
    // In the order they were made: by time, then by rowid (a fork's
    // children share a millisecond and are inserted in order; ids are random).
    auto stmt = db_.prepare(fmt::format("SELECT {} FROM sandboxes ORDER BY created_at, rowid", kSandboxColumns));
    if (!stmt) {
        return stmt.error();
    }
    std::vector<SandboxRecord> out;
    if (auto r = stmt->for_each_row([&](const Statement& row) -> Result<void> {
            auto sandbox = read_sandbox(row);
            if (!sandbox) {
                return sandbox.error();
            }
            if (matches(*sandbox, filter)) {
                out.push_back(std::move(*sandbox));
            }
            return ok();
        });
        !r) {
        return r.error();
    }
    return out;
}

Result<SandboxRecord> Store::change_state(const std::string& id, const StateChange& change) {
    return with_room([&] { return change_state_once(id, change); });
}

Result<SandboxRecord> Store::change_state_once(const std::string& id, const StateChange& change) {
    std::lock_guard lock(mutex_);
    auto tx = Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    auto found = find_sandbox_locked(id);
    if (!found) {
        return found.error();
    }
    if (!*found) {
        return not_found("sandbox", id);
    }
    SandboxRecord s = std::move(**found);
    if (!can_transition(s.state, change.to)) {
        return make_coded_error("invalid_state", "sandbox {} is {} and cannot become {}", id,
                                to_string(s.state), to_string(change.to));
    }
    const SandboxState before = s.state;
    s.state = change.to;
    if (change.to == SandboxState::Running) {
        s.started_at = change.now;
        s.last_activity_at = change.now;
    }
    if (change.vmm) {
        s.vmm = change.vmm;
    } else if (!has_vmm(change.to)) {
        s.vmm.reset();
    }
    auto update = db_.prepare(
        "UPDATE sandboxes SET state = ?, started_at = ?, last_activity_at = ?, vmm_pid = ?, vmm_start_time = "
        "?, "
        "vmm_control_socket = ? WHERE id = ?");
    if (!update) {
        return update.error();
    }
    update->bind_all(to_string(s.state), s.started_at, s.last_activity_at);
    if (s.vmm) {
        update->bind(4, s.vmm->pid)
            .bind(5, s.vmm->start_time)
            .bind(6, std::string_view(s.vmm->control_socket));
    } else {
        update->bind(4, nullptr).bind(5, nullptr).bind(6, nullptr);
    }
    update->bind(7, std::string_view(id));
    if (auto r = update->run(); !r) {
        return r.error();
    }
    auto event = nlohmann::json{{"from", to_string(before)}, {"to", to_string(s.state)}};
    if (!change.reason.empty()) {
        event["reason"] = change.reason;
    }
    if (!change.detail.empty()) {
        event["detail"] = change.detail;
    }
    if (change.syscall) {
        event["syscall"] = *change.syscall;
    }
    if (auto r = add_event_locked(id, "state", event.dump(), change.now); !r) {
        return r.error();
    }
    if (auto r = tx->commit(); !r) {
        return r.error();
    }
    return s;
}

Result<void> Store::update_one_locked(std::string_view sql, const std::string& id,
                                      const std::optional<std::int64_t>& value) {
    auto stmt = db_.prepare(sql);
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(value, id).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return not_found("sandbox", id);
    }
    return ok();
}

Result<void> Store::touch(const std::string& id, UnixMillis now) {
    std::lock_guard lock(mutex_);
    return update_one_locked("UPDATE sandboxes SET last_activity_at = MAX(last_activity_at, ?) WHERE id = ?",
                             id, now);
}

Result<void> Store::set_auto_stop(const std::string& id, const AutoStop& auto_stop, UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto tx = Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    auto stmt = db_.prepare("UPDATE sandboxes SET auto_stop_at = ?, ttl_seconds = ? WHERE id = ?");
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(auto_stop.deadline, auto_stop.ttl_seconds, id).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return not_found("sandbox", id);
    }
    nlohmann::json event = {
        {"autoStopAt", auto_stop.deadline ? nlohmann::json(*auto_stop.deadline) : nullptr},
        {"ttlSeconds", auto_stop.ttl_seconds ? nlohmann::json(*auto_stop.ttl_seconds) : nullptr}};
    if (auto r = add_event_locked(id, "auto_stop", event.dump(), now); !r) {
        return r.error();
    }
    return tx->commit();
}

Result<void> Store::set_idle_minutes(const std::string& id, std::optional<int> minutes, UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto tx = Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    std::optional<std::int64_t> value;
    if (minutes) {
        value = *minutes;
    }
    // The idle time counts from the change, not from the last activity before it.
    auto stmt = db_.prepare(
        "UPDATE sandboxes SET idle_minutes = ?, last_activity_at = MAX(last_activity_at, ?) WHERE id = ?");
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(value, now, id).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return not_found("sandbox", id);
    }
    if (auto r = add_event_locked(
            id, "idle", nlohmann::json{{"idleMinutes", value ? nlohmann::json(*value) : nullptr}}.dump(),
            now);
        !r) {
        return r.error();
    }
    return tx->commit();
}

Result<void> Store::set_shape(const std::string& id, const std::string& size, int cpus, int memory_mib,
                              int disk_gib) {
    std::lock_guard lock(mutex_);
    auto stmt = db_.prepare("UPDATE sandboxes SET size = ?, cpus = ?, memory_mib = ?, disk_gib = ? WHERE id = ?");
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(std::string_view(size), std::int64_t{cpus}, std::int64_t{memory_mib},
                                std::int64_t{disk_gib}, std::string_view(id))
                     .run();
        !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return not_found("sandbox", id);
    }
    return ok();
}

Result<void> Store::delete_sandbox(const std::string& id, UnixMillis now) {
    return with_room([&] { return delete_sandbox_once(id, now); });
}

Result<void> Store::delete_sandbox_once(const std::string& id, UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto tx = Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    auto stmt = db_.prepare("DELETE FROM sandboxes WHERE id = ?");
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(id).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return not_found("sandbox", id);
    }
    if (auto r = add_event_locked(id, "deleted", "{}", now); !r) {
        return r.error();
    }
    return tx->commit();
}

}  // namespace sbx::sbxd

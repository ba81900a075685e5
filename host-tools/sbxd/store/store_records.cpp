// The Store's smaller tables: API keys, named snapshots, exec history,
// events, and pruning (store.cpp has the schema and the sandboxes).
#include <nlohmann/json.hpp>

#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

namespace {

using sqlite::Statement;
using sqlite::Transaction;

template <typename T, typename ReadRow>
Result<std::vector<T>> collect(Result<Statement> stmt, ReadRow read_row) {
    if (!stmt) {
        return stmt.error();
    }
    std::vector<T> out;
    if (auto r = stmt->for_each_row([&](const Statement& row) -> Result<void> {
            out.push_back(read_row(row));
            return ok();
        });
        !r) {
        return r.error();
    }
    return out;
}

// The prepared statement with its parameters bound, or the prepare error.
template <typename... Args>
Result<Statement> bound(Result<Statement> stmt, const Args&... args) {
    if (stmt) {
        stmt->bind_all(args...);
    }
    return stmt;
}

#define SBXD_API_KEY_COLUMNS "id, hash, name, sandbox_id, created_at, read_only, expires_at"

ApiKeyRecord read_api_key(const Statement& row) {
    return ApiKeyRecord{row.text(0),  row.text(1),          row.text(2),
                        row.optional_text(3), row.int64(4), row.int64(5) != 0,
                        row.optional_int64(6)};
}

#define SBXD_SNAPSHOT_COLUMNS \
    "name, source_sandbox_id, has_memory, source, disk_gib, created_at, cpus, memory_mib, size_bytes, cpu_signature"

SnapshotRecord read_snapshot(const Statement& row) {
    return SnapshotRecord{row.text(0),
                          row.text(1),
                          row.int64(2) != 0,
                          row.text(3),
                          static_cast<int>(row.int64(4)),
                          row.int64(5),
                          static_cast<int>(row.int64(6)),
                          static_cast<int>(row.int64(7)),
                          row.int64(8),
                          row.text(9)};
}

}  // namespace

Result<void> Store::add_api_key(const ApiKeyRecord& key) {
    std::lock_guard lock(mutex_);
    auto stmt =
        db_.prepare("INSERT INTO api_keys (" SBXD_API_KEY_COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?)");
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(key.id, key.hash, key.name, key.sandbox_id, key.created_at,
                                std::int64_t{key.read_only ? 1 : 0}, key.expires_at)
                     .run();
        !r) {
        if (sqlite::is_unique_violation(r.error())) {
            return make_coded_error("already_exists", "API key {} exists", key.id);
        }
        if (r.error().message.find("FOREIGN KEY") != std::string::npos) {
            return make_coded_error("not_found", "no sandbox '{}' to scope the key to",
                                    key.sandbox_id.value_or(""));
        }
        return r.error();
    }
    return ok();
}

Result<std::optional<ApiKeyRecord>> Store::find_api_key(const std::string& hash) {
    std::lock_guard lock(mutex_);
    auto keys = collect<ApiKeyRecord>(
        bound(db_.prepare("SELECT " SBXD_API_KEY_COLUMNS " FROM api_keys WHERE hash = ?"),
              hash),
        read_api_key);
    if (!keys) {
        return keys.error();
    }
    if (keys->empty()) {
        return std::optional<ApiKeyRecord>();
    }
    return std::optional<ApiKeyRecord>(keys->front());
}

Result<std::vector<ApiKeyRecord>> Store::list_api_keys() {
    std::lock_guard lock(mutex_);
    return collect<ApiKeyRecord>(
        db_.prepare("SELECT " SBXD_API_KEY_COLUMNS " FROM api_keys ORDER BY created_at, rowid"),  // as made
        read_api_key);
}

Result<void> Store::remove_api_key(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto stmt = db_.prepare("DELETE FROM api_keys WHERE id = ?");
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(id).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return make_coded_error("not_found", "no API key '{}'", id);
    }
    return ok();
}

Result<void> Store::add_snapshot(const SnapshotRecord& s) {
    std::lock_guard lock(mutex_);
    auto stmt = db_.prepare(
        "INSERT INTO snapshots (" SBXD_SNAPSHOT_COLUMNS ") VALUES (?,?,?,?,?,?,?,?,?,?)");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind_all(s.name, s.source_sandbox_id, std::int64_t{s.has_memory}, s.from, std::int64_t{s.disk_gib},
                   s.created_at, std::int64_t{s.cpus}, std::int64_t{s.memory_mib}, s.size_bytes, s.cpu_signature);
    if (auto r = stmt->run(); !r) {
        if (sqlite::is_unique_violation(r.error())) {
            return make_coded_error("already_exists", "a snapshot named '{}' exists", s.name);
        }
        return r.error();
    }
    return ok();
}

Result<SnapshotRecord> Store::get_snapshot(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto found = collect<SnapshotRecord>(
        bound(db_.prepare(
                  "SELECT " SBXD_SNAPSHOT_COLUMNS " FROM snapshots "
                  "WHERE name = ?"),
              name),
        read_snapshot);
    if (!found) {
        return found.error();
    }
    if (found->empty()) {
        return make_coded_error("not_found", "no snapshot '{}'", name);
    }
    return found->front();
}

Result<std::vector<SnapshotRecord>> Store::list_snapshots() {
    std::lock_guard lock(mutex_);
    return collect<SnapshotRecord>(
        db_.prepare("SELECT " SBXD_SNAPSHOT_COLUMNS " FROM snapshots "
                    "ORDER BY created_at, name"),
        read_snapshot);
}

Result<void> Store::remove_snapshot(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto stmt = db_.prepare("DELETE FROM snapshots WHERE name = ?");
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(name).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return make_coded_error("not_found", "no snapshot '{}'", name);
    }
    return ok();
}

Result<std::int64_t> Store::add_exec(const std::string& sandbox_id, const std::string& command,
                                     UnixMillis started_at, const std::optional<std::string>& key_id) {
    std::lock_guard lock(mutex_);
    auto stmt = db_.prepare(
        "INSERT INTO exec_history (sandbox_id, command, started_at, key_id) VALUES (?, ?, ?, ?) RETURNING id");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind_all(sandbox_id, command, started_at, key_id);
    auto row = stmt->step();
    if (!row) {
        if (row.error().message.find("FOREIGN KEY") != std::string::npos) {
            return make_coded_error("not_found", "no sandbox '{}'", sandbox_id);
        }
        return row.error();
    }
    std::int64_t id = stmt->int64(0);
    if (auto r = stmt->run(); !r) {
        return r.error();
    }
    return id;
}

Result<void> Store::finish_exec(std::int64_t exec_id, int exit_code) {
    std::lock_guard lock(mutex_);
    auto stmt = db_.prepare("UPDATE exec_history SET exit_code = ? WHERE id = ?");
    if (!stmt) {
        return stmt.error();
    }
    if (auto r = stmt->bind_all(std::int64_t{exit_code}, exec_id).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return make_coded_error("not_found", "no exec {}", exec_id);
    }
    return ok();
}

Result<std::vector<ExecRecord>> Store::list_execs(const std::string& sandbox_id) {
    std::lock_guard lock(mutex_);
    return collect<ExecRecord>(
        bound(db_.prepare("SELECT id, sandbox_id, command, started_at, exit_code, key_id FROM exec_history WHERE "
                          "sandbox_id = ? "
                          "ORDER BY started_at, id"),
              sandbox_id),
        [](const Statement& row) {
            ExecRecord e{row.int64(0), row.text(1), row.text(2), row.int64(3), std::nullopt, row.optional_text(5)};
            if (auto code = row.optional_int64(4)) {
                e.exit_code = static_cast<int>(*code);
            }
            return e;
        });
}

Result<std::vector<EventRecord>> Store::list_events(std::int64_t after_id, int limit) {
    std::lock_guard lock(mutex_);
    auto stmt = bound(
        db_.prepare("SELECT id, sandbox_id, type, data, at FROM events WHERE id > ? ORDER BY id LIMIT ?"),
        after_id, std::int64_t{limit});
    return collect<EventRecord>(std::move(stmt), [](const Statement& row) {
        return EventRecord{row.int64(0), row.optional_text(1), row.text(2), row.text(3), row.int64(4)};
    });
}

Result<std::optional<SandboxRecord>> Store::find_create_claim(const IdempotencyClaim& claim, UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto known = bound(db_.prepare("SELECT body_hash, sandbox_id FROM idempotency_keys WHERE key = ? AND "
                                   "created_at > ?"),
                       claim.key, now - kIdempotencyKeyLifetimeMs);
    if (!known) {
        return known.error();
    }
    auto row = known->step();
    if (!row) {
        return row.error();
    }
    if (!*row) {
        return std::optional<SandboxRecord>();
    }
    if (known->text(0) != claim.body_hash) {
        return make_coded_error("idempotency_conflict",
                                "Idempotency-Key '{}' was used with a different request body", claim.key);
    }
    return find_sandbox_locked(known->text(1));
}

Result<std::vector<SandboxRecord>> Store::find_fork_claim(const IdempotencyClaim& claim, UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto found = collect<std::pair<std::string, std::string>>(
        bound(db_.prepare("SELECT body_hash, sandbox_id FROM fork_idempotency_keys WHERE key = ? AND "
                          "created_at > ? ORDER BY rowid"),
              claim.key, now - kIdempotencyKeyLifetimeMs),
        [](const Statement& row) {
            return std::pair{row.text(0), row.text(1)};
        });
    if (!found) {
        return found.error();
    }
    std::vector<SandboxRecord> children;
    for (const auto& [hash, id] : *found) {
        if (hash != claim.body_hash) {
            return make_coded_error("idempotency_conflict",
                                    "Idempotency-Key '{}' was used with a different fork", claim.key);
        }
        auto child = find_sandbox_locked(id);
        if (!child) {
            return child.error();
        }
        if (*child) {
            children.push_back(std::move(**child));
        }
    }
    return children;
}

Result<void> Store::add_fork_child(const IdempotencyClaim& claim, const std::string& child_id,
                                   UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto stmt =
        bound(db_.prepare("INSERT INTO fork_idempotency_keys (key, body_hash, sandbox_id, created_at) "
                          "VALUES (?, ?, ?, ?)"),
              claim.key, claim.body_hash, child_id, now);
    if (!stmt) {
        return stmt.error();
    }
    return stmt->run();
}

Result<std::int64_t> Store::prune(UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto tx = Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    std::int64_t removed = 0;
    const std::pair<std::string_view, UnixMillis> rules[] = {
        {"DELETE FROM idempotency_keys WHERE created_at <= ?", now - kIdempotencyKeyLifetimeMs},
        {"DELETE FROM fork_idempotency_keys WHERE created_at <= ?", now - kIdempotencyKeyLifetimeMs},
        {"DELETE FROM exec_history WHERE started_at <= ?", now - kExecHistoryLifetimeMs},
        {"DELETE FROM events WHERE at <= ?", now - kEventLifetimeMs},
    };
    for (const auto& [sql, cutoff] : rules) {
        auto stmt = db_.prepare(sql);
        if (!stmt) {
            return stmt.error();
        }
        if (auto r = stmt->bind_all(cutoff).run(); !r) {
            return r.error();
        }
        removed += db_.changes();
    }
    if (auto r = tx->commit(); !r) {
        return r.error();
    }
    return removed;
}

}  // namespace sbx::sbxd

// Hosted ports in the store (schema version 6): one row per (sandbox,
// port); the unique index on (subdomain, port) is what the proxy looks a
// request's Host up by.
#include <nlohmann/json.hpp>

#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {
namespace {

#define SBXD_HOSTED_PORT_COLUMNS "sandbox_id, port, subdomain, token, public, localhost, created_at"

HostedPortRecord read_hosted_port(const sqlite::Statement& row) {
    return HostedPortRecord{
        .sandbox_id = row.text(0),
        .port = static_cast<std::uint16_t>(row.int64(1)),
        .subdomain = row.text(2),
        .token = row.text(3),
        .is_public = row.int64(4) != 0,
        .localhost = row.int64(5) != 0,
        .created_at = row.int64(6),
    };
}

Result<std::vector<HostedPortRecord>> read_all(Result<sqlite::Statement> statement) {
    if (!statement) {
        return statement.error();
    }
    std::vector<HostedPortRecord> rows;
    if (auto r = statement->for_each_row([&](const sqlite::Statement& row) -> Result<void> {
            rows.push_back(read_hosted_port(row));
            return ok();
        });
        !r) {
        return r.error();
    }
    return rows;
}

}  // namespace

Result<HostedPortRecord> Store::host_port(const HostedPortRecord& port) {
    std::lock_guard lock(mutex_);
    auto tx = sqlite::Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    auto sandbox = find_sandbox_locked(port.sandbox_id);
    if (!sandbox) {
        return sandbox.error();
    }
    if (!*sandbox) {
        return make_coded_error("not_found", "no sandbox '{}'", port.sandbox_id);
    }
    auto existing = read_all([&] {
        auto s = db_.prepare("SELECT " SBXD_HOSTED_PORT_COLUMNS " FROM hosted_ports WHERE sandbox_id = ?");
        if (s) {
            s->bind_all(port.sandbox_id);
        }
        return s;
    }());
    if (!existing) {
        return existing.error();
    }
    HostedPortRecord row = port;
    if (!existing->empty()) {
        row.subdomain = existing->front().subdomain;
    }
    bool updated = false;
    for (const auto& e : *existing) {
        if (e.port == port.port) {
            row.token = e.token;
            row.created_at = e.created_at;
            updated = true;
        }
    }
    auto write = db_.prepare(
        updated ? "UPDATE hosted_ports SET public = ?, localhost = ? WHERE sandbox_id = ? AND port = ?"
                : "INSERT INTO hosted_ports (public, localhost, sandbox_id, port, subdomain, token, created_at) "
                  "VALUES (?,?,?,?,?,?,?)");
    if (!write) {
        return write.error();
    }
    write->bind_all(std::int64_t{row.is_public}, std::int64_t{row.localhost}, row.sandbox_id,
                    std::int64_t{row.port});
    if (!updated) {
        write->bind(5, row.subdomain).bind(6, row.token).bind(7, row.created_at);
    }
    if (auto r = write->run(); !r) {
        if (sqlite::is_unique_violation(r.error())) {
            return make_coded_error("already_exists", "subdomain '{}' is taken", row.subdomain);
        }
        return r.error();
    }
    nlohmann::json event = {{"port", row.port}, {"public", row.is_public}, {"localhost", row.localhost}};
    if (auto r = add_event_locked(row.sandbox_id, "hosted", event.dump(), row.created_at); !r) {
        return r.error();
    }
    if (auto r = tx->commit(); !r) {
        return r.error();
    }
    return row;
}

Result<std::vector<HostedPortRecord>> Store::list_hosted_ports(const std::optional<std::string>& sandbox_id) {
    std::lock_guard lock(mutex_);
    if (!sandbox_id) {
        return read_all(db_.prepare("SELECT " SBXD_HOSTED_PORT_COLUMNS
                                    " FROM hosted_ports ORDER BY sandbox_id, port"));
    }
    auto s = db_.prepare("SELECT " SBXD_HOSTED_PORT_COLUMNS " FROM hosted_ports WHERE sandbox_id = ? ORDER BY port");
    if (s) {
        s->bind_all(*sandbox_id);
    }
    return read_all(std::move(s));
}

Result<HostedPortRecord> Store::find_hosted_port(std::string_view subdomain, std::uint16_t port) {
    std::lock_guard lock(mutex_);
    auto s = db_.prepare("SELECT " SBXD_HOSTED_PORT_COLUMNS " FROM hosted_ports WHERE subdomain = ? AND port = ?");
    if (s) {
        s->bind_all(subdomain, std::int64_t{port});
    }
    auto rows = read_all(std::move(s));
    if (!rows) {
        return rows.error();
    }
    if (rows->empty()) {
        return make_coded_error("not_found", "nothing is hosted at {}-{}", subdomain, port);
    }
    return rows->front();
}

Result<void> Store::unhost_port(const std::string& sandbox_id, std::uint16_t port) {
    std::lock_guard lock(mutex_);
    auto s = db_.prepare("DELETE FROM hosted_ports WHERE sandbox_id = ? AND port = ?");
    if (!s) {
        return s.error();
    }
    if (auto r = s->bind_all(sandbox_id, std::int64_t{port}).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return make_coded_error("not_found", "sandbox '{}' does not host port {}", sandbox_id, port);
    }
    return ok();
}

}  // namespace sbx::sbxd

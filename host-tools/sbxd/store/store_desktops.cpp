// Desktops in the store (schema version 8): one row per sandbox; the
// unique subdomain is what the proxy looks a desktop link's Host up by.
#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {
namespace {

#define SBXD_DESKTOP_COLUMNS \
    "sandbox_id, subdomain, token, view_token, display, vnc_port, width, height, created_at"

Result<std::optional<DesktopRecord>> read_one(Result<sqlite::Statement> statement) {
    if (!statement) {
        return statement.error();
    }
    std::optional<DesktopRecord> found;
    if (auto r = statement->for_each_row([&](const sqlite::Statement& row) -> Result<void> {
            found = DesktopRecord{
                .sandbox_id = row.text(0),
                .subdomain = row.text(1),
                .token = row.text(2),
                .view_token = row.text(3),
                .display = static_cast<int>(row.int64(4)),
                .vnc_port = static_cast<std::uint16_t>(row.int64(5)),
                .width = static_cast<int>(row.int64(6)),
                .height = static_cast<int>(row.int64(7)),
                .created_at = row.int64(8),
            };
            return ok();
        });
        !r) {
        return r.error();
    }
    return found;
}

}  // namespace

Result<DesktopRecord> Store::set_desktop(const DesktopRecord& desktop) {
    std::lock_guard lock(mutex_);
    auto tx = sqlite::Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    auto sandbox = find_sandbox_locked(desktop.sandbox_id);
    if (!sandbox) {
        return sandbox.error();
    }
    if (!*sandbox) {
        return make_coded_error("not_found", "no sandbox '{}'", desktop.sandbox_id);
    }
    auto statement = db_.prepare("SELECT " SBXD_DESKTOP_COLUMNS " FROM desktops WHERE sandbox_id = ?");
    if (statement) {
        statement->bind_all(desktop.sandbox_id);
    }
    auto existing = read_one(std::move(statement));
    if (!existing) {
        return existing.error();
    }
    DesktopRecord row = desktop;
    if (*existing) {
        row.subdomain = (*existing)->subdomain;
        row.token = (*existing)->token;
        row.view_token = (*existing)->view_token;
        row.created_at = (*existing)->created_at;
    }
    auto write = db_.prepare(
        *existing ? "UPDATE desktops SET display = ?, vnc_port = ?, width = ?, height = ? WHERE sandbox_id = ?"
                  : "INSERT INTO desktops (display, vnc_port, width, height, sandbox_id, subdomain, token, "
                    "view_token, created_at) VALUES (?,?,?,?,?,?,?,?,?)");
    if (!write) {
        return write.error();
    }
    write->bind_all(std::int64_t{row.display}, std::int64_t{row.vnc_port}, std::int64_t{row.width},
                    std::int64_t{row.height}, row.sandbox_id);
    if (!*existing) {
        write->bind(6, row.subdomain).bind(7, row.token).bind(8, row.view_token).bind(9, row.created_at);
    }
    if (auto r = write->run(); !r) {
        if (sqlite::is_unique_violation(r.error())) {
            return make_coded_error("already_exists", "subdomain '{}' is taken", row.subdomain);
        }
        return r.error();
    }
    if (auto r = tx->commit(); !r) {
        return r.error();
    }
    return row;
}

Result<std::optional<DesktopRecord>> Store::get_desktop(const std::string& sandbox_id) {
    std::lock_guard lock(mutex_);
    auto statement = db_.prepare("SELECT " SBXD_DESKTOP_COLUMNS " FROM desktops WHERE sandbox_id = ?");
    if (statement) {
        statement->bind_all(sandbox_id);
    }
    return read_one(std::move(statement));
}

Result<DesktopRecord> Store::find_desktop(std::string_view subdomain) {
    std::lock_guard lock(mutex_);
    auto statement = db_.prepare("SELECT " SBXD_DESKTOP_COLUMNS " FROM desktops WHERE subdomain = ?");
    if (statement) {
        statement->bind_all(subdomain);
    }
    auto found = read_one(std::move(statement));
    if (!found) {
        return found.error();
    }
    if (!*found) {
        return make_coded_error("not_found", "no desktop at {}", subdomain);
    }
    return **found;
}

}  // namespace sbx::sbxd

// A sandbox's network in the store (docs/network.md, "Addresses"): the
// slot is chosen and written in one transaction under the store's lock, and
// the unique index on net_slot (schema version 5) backs that up.
#include <nlohmann/json.hpp>

#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

Result<SandboxNetwork> Store::claim_network(const std::string& id, const SlotPicker& pick, const std::string& mac,
                                            UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto tx = sqlite::Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    auto sandbox = find_sandbox_locked(id);
    if (!sandbox) {
        return sandbox.error();
    }
    if (!*sandbox) {
        return make_coded_error("not_found", "no sandbox '{}'", id);
    }
    if ((*sandbox)->network) {
        return *(*sandbox)->network;
    }
    auto used_rows = db_.prepare("SELECT net_slot FROM sandboxes WHERE net_slot IS NOT NULL");
    if (!used_rows) {
        return used_rows.error();
    }
    std::set<std::uint32_t> used;
    if (auto r = used_rows->for_each_row([&](const sqlite::Statement& row) -> Result<void> {
            used.insert(static_cast<std::uint32_t>(row.int64(0)));
            return ok();
        });
        !r) {
        return r.error();
    }
    auto slot = pick(used);
    if (!slot) {
        return slot.error();
    }
    SandboxNetwork network{*slot, mac};
    auto update = db_.prepare("UPDATE sandboxes SET net_slot = ?, net_mac = ? WHERE id = ?");
    if (!update) {
        return update.error();
    }
    if (auto r = update->bind_all(std::int64_t{network.slot}, network.mac, id).run(); !r) {
        return r.error();
    }
    nlohmann::json event = {{"slot", network.slot}, {"mac", network.mac}, {"egress", (*sandbox)->egress}};
    if (auto r = add_event_locked(id, "network", event.dump(), now); !r) {
        return r.error();
    }
    if (auto r = tx->commit(); !r) {
        return r.error();
    }
    return network;
}

Result<void> Store::set_egress(const std::string& id, const std::string& egress, UnixMillis now) {
    std::lock_guard lock(mutex_);
    auto tx = sqlite::Transaction::begin(db_);
    if (!tx) {
        return tx.error();
    }
    auto update = db_.prepare("UPDATE sandboxes SET net_egress = ? WHERE id = ?");
    if (!update) {
        return update.error();
    }
    if (auto r = update->bind_all(egress, id).run(); !r) {
        return r.error();
    }
    if (db_.changes() == 0) {
        return make_coded_error("not_found", "no sandbox '{}'", id);
    }
    nlohmann::json event = {{"egress", egress}};
    if (auto r = add_event_locked(id, "egress", event.dump(), now); !r) {
        return r.error();
    }
    return tx->commit();
}

}  // namespace sbx::sbxd

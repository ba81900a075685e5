// The egress policy in the kernel: sbxd's one nftables table, `inet sbxd`,
// loaded through libnftables from the JSON of egress_rules.hpp. Each change
// is one netlink transaction: the table is replaced whole, a sandbox is
// added or removed as set elements. The owner deletes the table when it
// goes, unless it was released for the next sbxd, which rebuilds it.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "host-tools/sbxd/net/egress_rules.hpp"

struct nft_ctx;

namespace sbx::sbxd::net {

// A libnftables context (JSON in, JSON out). Errors carry libnftables'
// own messages and the code "nftables".
class Nftables {
public:
    // dry_run: the kernel checks each transaction and commits none (nft -c).
    static Result<Nftables> open(bool dry_run = false);

    Result<void> run(const nlohmann::json& batch);
    // `nft -j list ...`: "list table inet sbxd", "list tables".
    Result<nlohmann::json> list(std::string_view what);

private:
    struct Free {
        void operator()(nft_ctx* ctx) const;
    };
    explicit Nftables(nft_ctx* ctx) : ctx_(ctx) {}
    Result<std::string> run_text(std::string_view command);
    std::unique_ptr<nft_ctx, Free> ctx_;
};

class EgressTable {
public:
    // Replaces any `inet sbxd` table (one an earlier sbxd left) with one
    // for `policy` holding `members`, in one transaction.
    static Result<EgressTable> create(const EgressPolicy& policy, std::span<const EgressMember> members = {});

    EgressTable(EgressTable&& other) noexcept;
    EgressTable& operator=(EgressTable&&) noexcept;
    EgressTable(const EgressTable&) = delete;
    EgressTable& operator=(const EgressTable&) = delete;
    ~EgressTable();

    // Replaces the table with a fresh one holding `members`, in one
    // transaction (an earlier sbxd's or this one's).
    Result<void> rebuild(const EgressPolicy& policy, std::span<const EgressMember> members);
    // Adds the member, or updates its deny-all membership.
    Result<void> add(const EgressMember& member);
    // Replaces `from`'s elements with `to`'s (one sandbox's new policy).
    Result<void> change(const EgressMember& from, const EgressMember& to);
    // Removes the member's elements (nothing when they are not there).
    Result<void> remove(const EgressMember& member);
    // Deletes the table now.
    Result<void> destroy();
    // Leaves the table in the kernel; this owner forgets it.
    void release();

private:
    explicit EgressTable(Nftables nft) : nft_(std::move(nft)) {}
    std::optional<Nftables> nft_;  // empty: released or destroyed
};

// Whether the host has an `inet sbxd` table.
Result<bool> egress_table_exists();

}  // namespace sbx::sbxd::net

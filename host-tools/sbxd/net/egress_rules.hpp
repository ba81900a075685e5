// The egress policy as libnftables JSON (libnftables-json(5)): the whole
// `inet sbxd` table, and the element changes that add or remove one
// sandbox. Pure: EgressTable hands these to libnftables. docs/network.md
// ("Egress policy") says what each rule is for.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host-tools/sbxd/net/address_pool.hpp"
#include "host-tools/sbxd/net/egress_spec.hpp"

namespace sbx::sbxd::net {

inline constexpr std::string_view kTableFamily = "inet";
inline constexpr std::string_view kTableName = "sbxd";

// What the table is built from.
struct EgressPolicy {
    Ipv4Cidr pool;
    std::string uplink;  // the interface sandboxes' traffic may leave by (and is masqueraded on)
};

// One sandbox as the table sees it.
struct EgressMember {
    std::string interface;  // its tap, "sbx<slot>"
    Ipv4Address guest;      // the only source address accepted from it
    Ipv4Address gateway;    // the host's end: where its DNS goes
    Egress egress;          // deny-all: nothing past the tap; allow-list: DNS and its networks
};
EgressMember egress_member(const SandboxAddress& address, const Egress& egress);

// One transaction that replaces any `inet sbxd` table with a fresh one
// holding `members`: add (so the delete cannot fail), delete, add all.
nlohmann::json table_batch(const EgressPolicy& policy, std::span<const EgressMember> members);
// One transaction that puts the member's elements in (its deny-all and
// allow-list memberships set either way); adding an element already there
// is no error.
nlohmann::json add_member_batch(const EgressMember& member);
// One transaction that takes `from`'s elements out and puts `to`'s in: a
// new egress policy for one sandbox, its allow list replaced whole.
nlohmann::json change_member_batch(const EgressMember& from, const EgressMember& to);
// One transaction that takes the member's elements out, whether or not
// they are there (each is added, then deleted).
nlohmann::json remove_member_batch(const EgressMember& member);
// One transaction that removes the table whether or not it exists.
nlohmann::json delete_table_batch();

}  // namespace sbx::sbxd::net

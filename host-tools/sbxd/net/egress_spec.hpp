// A sandbox's egress policy (docs/network.md, "Per-sandbox egress") as a
// value: the whole internet (the default), nothing at all, or only an
// allow list of IPv4 networks. The list narrows the default policy and
// never widens it: private, loopback, link-local, CGNAT, the pool, other
// sandboxes and TCP port 25 stay dropped whatever it says. Pure; the text
// form is what the store keeps and what `sbx --egress` takes.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/net/address_pool.hpp"

namespace sbx::sbxd::net {

enum class EgressMode {
    internet,    // the policy of docs/network.md
    deny_all,    // nothing past the tap, DNS included
    allow_list,  // DNS, and only the listed networks
};

inline constexpr std::size_t kMaxEgressAllow = 64;

struct Egress {
    EgressMode mode = EgressMode::internet;
    std::vector<Ipv4Cidr> allow;  // allow_list: ascending, none inside another
    friend bool operator==(const Egress&, const Egress&) = default;

    static Egress deny_all() { return {EgressMode::deny_all, {}}; }
};

// "internet", "deny-all", "allow-list".
std::string_view egress_mode_name(EgressMode mode);

// The allow list from its networks ("203.0.113.0/24", "198.51.100.10/32"):
// 1 to kMaxEgressAllow of them, none wholly inside a blocked range (it
// could never be reached); a network inside another listed one is dropped.
// Code "bad_egress".
Result<Egress> egress_allow_list(std::span<const std::string> networks);

// The text form: "internet", "deny-all", or "allow:" and the networks
// joined by commas ("allow:198.51.100.10/32,203.0.113.0/24").
std::string format_egress(const Egress& egress);
// Code "bad_egress".
Result<Egress> parse_egress(std::string_view text);

// The destinations no sandbox reaches (besides the pool itself and the
// host): RFC 6890's private, shared (CGNAT), loopback, link-local,
// "this network", multicast and reserved blocks, limited broadcast included.
std::span<const std::string_view> blocked_ipv4_ranges();

}  // namespace sbx::sbxd::net

#include "host-tools/sbxd/net/egress_spec.hpp"

#include <algorithm>
#include <array>

namespace sbx::sbxd::net {
namespace {

constexpr std::string_view kBadEgress = "bad_egress";
constexpr std::string_view kAllowPrefix = "allow:";

constexpr std::array<std::string_view, 9> kBlockedRanges = {
    "0.0.0.0/8",       // "this network" (RFC 791)
    "10.0.0.0/8",      // private (RFC 1918)
    "100.64.0.0/10",   // shared address space, CGNAT (RFC 6598)
    "127.0.0.0/8",     // loopback (RFC 1122)
    "169.254.0.0/16",  // link-local (RFC 3927), cloud metadata services among them
    "172.16.0.0/12",   // private (RFC 1918)
    "192.168.0.0/16",  // private (RFC 1918)
    "224.0.0.0/4",     // multicast (RFC 5771)
    "240.0.0.0/4",     // reserved (RFC 1112), 255.255.255.255 (limited broadcast, RFC 919) among them
};

// Whether `inner` lies wholly inside `outer`.
bool inside(const Ipv4Cidr& inner, const Ipv4Cidr& outer) {
    return inner.prefix >= outer.prefix && outer.contains(inner.network);
}

}  // namespace

std::string_view egress_mode_name(EgressMode mode) {
    switch (mode) {
        case EgressMode::deny_all:
            return "deny-all";
        case EgressMode::allow_list:
            return "allow-list";
        case EgressMode::internet:
            break;
    }
    return "internet";
}

Result<Egress> egress_allow_list(std::span<const std::string> networks) {
    if (networks.empty()) {
        return make_coded_error(kBadEgress, "an allow list needs at least one network (deny-all allows none)");
    }
    if (networks.size() > kMaxEgressAllow) {
        return make_coded_error(kBadEgress, "an allow list has at most {} networks, not {}", kMaxEgressAllow,
                                networks.size());
    }
    std::vector<Ipv4Cidr> parsed;
    for (const auto& text : networks) {
        auto cidr = parse_ipv4_cidr(text);
        if (!cidr) {
            return cidr.error().context("allow list").with_code(kBadEgress);
        }
        for (std::string_view range : kBlockedRanges) {
            if (inside(*cidr, *parse_ipv4_cidr(range))) {  // constants, checked by the unit test
                return make_coded_error(kBadEgress,
                                        "allow list: {} is inside {}, which no sandbox reaches (docs/network.md)",
                                        text, range);
            }
        }
        parsed.push_back(*cidr);
    }
    // Networks either nest or are disjoint: keep the outermost of each
    // nest, so the table's interval set gets no overlapping elements.
    std::sort(parsed.begin(), parsed.end(), [](const Ipv4Cidr& a, const Ipv4Cidr& b) {
        return a.network.value != b.network.value ? a.network.value < b.network.value : a.prefix < b.prefix;
    });
    Egress egress{EgressMode::allow_list, {}};
    for (const auto& cidr : parsed) {
        if (egress.allow.empty() || !inside(cidr, egress.allow.back())) {
            egress.allow.push_back(cidr);
        }
    }
    return egress;
}

std::string format_egress(const Egress& egress) {
    if (egress.mode != EgressMode::allow_list) {
        return std::string(egress_mode_name(egress.mode));
    }
    std::string text(kAllowPrefix);
    for (std::size_t i = 0; i < egress.allow.size(); ++i) {
        text += (i == 0 ? "" : ",") + egress.allow[i].to_string();
    }
    return text;
}

Result<Egress> parse_egress(std::string_view text) {
    if (text == "internet") {
        return Egress{};
    }
    if (text == "deny-all") {
        return Egress::deny_all();
    }
    if (!text.starts_with(kAllowPrefix)) {
        return make_coded_error(kBadEgress,
                                "egress \"{}\": internet, deny-all, or allow:NETWORK[,NETWORK...] "
                                "(e.g. allow:203.0.113.0/24)",
                                text);
    }
    std::vector<std::string> networks;
    std::string_view rest = text.substr(kAllowPrefix.size());
    while (!rest.empty() && networks.size() <= kMaxEgressAllow) {
        const auto comma = rest.find(',');
        networks.emplace_back(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    return egress_allow_list(networks);
}

std::span<const std::string_view> blocked_ipv4_ranges() {
    return kBlockedRanges;
}

}  // namespace sbx::sbxd::net

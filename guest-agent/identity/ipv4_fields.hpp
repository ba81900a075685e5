// The identity op's "ipv4" object (docs/agent-protocol.md, "identity") as
// both ends spell and check it: the sandbox's address with its prefix
// length ("10.231.0.6/30", RFC 4632 §3.1 notation), the gateway of its
// default route and up to three DNS servers. The host sends it; the agent
// applies it to the virtio-net interface (ipv4_apply.hpp).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "guest-agent/protocol/frame.hpp"  // before messages.hpp: FrameKind::Json
#include "guest-agent/protocol/messages.hpp"

namespace sbx::agent {

// glibc reads at most MAXNS (3) nameserver lines (resolv.conf(5)).
inline constexpr std::size_t kMaxDnsServers = 3;

struct Ipv4Address {
    std::uint32_t value = 0;  // host byte order: 10.231.0.6 is 0x0ae70006
    auto operator<=>(const Ipv4Address&) const = default;
};

struct Ipv4Prefix {
    Ipv4Address address;
    int length = 0;  // 0..32
    auto operator<=>(const Ipv4Prefix&) const = default;

    [[nodiscard]] std::uint32_t mask() const { return length == 0 ? 0 : ~std::uint32_t{0} << (32 - length); }
    [[nodiscard]] Ipv4Address network() const { return {address.value & mask()}; }
    [[nodiscard]] Ipv4Address broadcast() const { return {address.value | ~mask()}; }
    [[nodiscard]] bool contains(Ipv4Address a) const { return (a.value & mask()) == network().value; }
};

struct Ipv4Config {
    Ipv4Prefix address;
    Ipv4Address gateway;
    // nothing: /etc/resolv.conf is left alone; empty: written without nameservers.
    std::optional<std::vector<Ipv4Address>> dns;
    bool operator==(const Ipv4Config&) const = default;
};

// Four decimal octets 0..255 joined by dots, no leading zeros, signs or
// blanks (inet_pton(3)'s form; "010" is refused where inet_aton would read octal).
[[nodiscard]] Result<Ipv4Address> parse_ipv4(std::string_view text);
// An address, "/" and a decimal prefix length 0..32 (no leading zeros).
[[nodiscard]] Result<Ipv4Prefix> parse_ipv4_prefix(std::string_view text);
[[nodiscard]] std::string format_ipv4(Ipv4Address address);
[[nodiscard]] std::string format_ipv4_prefix(const Ipv4Prefix& prefix);

// The rules of the op: the address and the gateway are unicast (not in
// 0/8, 127/8, 224/4 or 240/4, RFC 6890) and, in a network of more than two
// addresses (prefix ≤ 30; a /31 has no network or broadcast address,
// RFC 3021), neither its network nor its broadcast address; the gateway is
// inside the address's network and is not the address; DNS servers are at
// most kMaxDnsServers, none listed twice, none in 0/8, 224/4 or 240/4
// (loopback is allowed: a resolver in the guest). An Error names the field.
[[nodiscard]] Result<void> check_ipv4_config(const Ipv4Config& config);

// The "ipv4" object: {"address", "gateway", "dns"?}; other keys are refused.
// Checked with check_ipv4_config.
[[nodiscard]] Result<Ipv4Config> parse_ipv4_config(const Json& object);
// The object parse_ipv4_config reads back.
[[nodiscard]] Json ipv4_config_json(const Ipv4Config& config);

// An "address/prefix, gateway, DNS servers" triple as a host program has
// it (sbx-agentctl's flags), parsed and checked as parse_ipv4_config does.
[[nodiscard]] Result<Ipv4Config> parse_ipv4_settings(std::string_view address, std::string_view gateway,
                                                     const std::optional<std::vector<std::string>>& dns);

// What the agent reads back from the kernel after the op (and reports on
// every identity call while it has a virtio-net interface).
struct Ipv4State {
    bool link_up = false;                // IFF_UP
    std::vector<Ipv4Prefix> addresses;   // the interface's, in the kernel's order
    std::optional<Ipv4Address> gateway;  // of the main table's lowest-metric default route through it
    std::vector<Ipv4Address> dns;        // the resolver file's IPv4 nameserver lines
    bool operator==(const Ipv4State&) const = default;
};
// {"link_up", "addresses": ["10.231.0.6/30"], "gateway": "10.231.0.5" or null, "dns": ["10.231.0.5"]}
[[nodiscard]] Json ipv4_state_json(const Ipv4State& state);
// The same object from the agent (untrusted): every field checked, lists bounded.
[[nodiscard]] Result<Ipv4State> parse_ipv4_state(const Json& object);
// Whether `state` is what `config` asks for: up, exactly the address, the
// gateway, and (when the config has them) the DNS servers; an Error says
// what differs.
[[nodiscard]] Result<void> check_ipv4_state(const Ipv4Config& config, const Ipv4State& state);

// /etc/resolv.conf for `servers` (resolv.conf(5)): a comment, one
// nameserver line each, and "options edns0 trust-ad".
[[nodiscard]] std::string resolv_conf_text(std::span<const Ipv4Address> servers);
// The IPv4 nameserver lines of a resolv.conf, in order (others are skipped).
[[nodiscard]] std::vector<Ipv4Address> resolv_conf_nameservers(std::string_view text);

}  // namespace sbx::agent

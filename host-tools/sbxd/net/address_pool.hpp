// Sandbox addressing (docs/network.md, "Addresses"): a pool of IPv4
// addresses cut into /30 networks (RFC 1878), one per sandbox slot. Slot N
// is the pool's network + 4N: +1 is the host's end (the gateway and DNS
// forwarder), +2 the guest. Pure: sbxd keeps the slot in its sandbox
// record, so the used slots are always known from the store.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd::net {

// An IPv4 address in host byte order.
struct Ipv4Address {
    std::uint32_t value = 0;
    friend bool operator==(Ipv4Address, Ipv4Address) = default;
};

// Dotted quad (RFC 1123 §2.1 form: four decimal octets, no leading zeros
// beyond a single 0, so "010.1.1.1" is refused rather than read as octal).
Result<Ipv4Address> parse_ipv4(std::string_view text);
std::string format_ipv4(Ipv4Address address);

// A network: an address whose host bits are zero, and its prefix length.
struct Ipv4Cidr {
    Ipv4Address network;
    int prefix = 0;
    [[nodiscard]] std::string to_string() const;
    [[nodiscard]] bool contains(Ipv4Address address) const;
    friend bool operator==(const Ipv4Cidr&, const Ipv4Cidr&) = default;
};

// "10.231.0.0/16". Errors have the code "bad_cidr".
Result<Ipv4Cidr> parse_ipv4_cidr(std::string_view text);

// Each sandbox's /30.
inline constexpr int kSandboxPrefix = 30;

// The pool sandboxes take their networks from. Its prefix is 8 to 30: a
// /30 holds one sandbox, a /8 some four million.
struct AddressPool {
    Ipv4Cidr cidr;

    // parse_ipv4_cidr plus the range check (code "bad_cidr").
    static Result<AddressPool> parse(std::string_view text);
    [[nodiscard]] std::uint32_t slot_count() const;
};

inline constexpr std::string_view kDefaultPool = "10.231.0.0/16";

// What a slot gives its sandbox.
struct SandboxAddress {
    std::uint32_t slot = 0;
    Ipv4Address network;                             // pool + 4 * slot
    Ipv4Address gateway;                             // network + 1: the host's end of the tap
    Ipv4Address guest;                               // network + 2
    [[nodiscard]] std::string guest_cidr() const;    // "10.231.0.2/30"
    [[nodiscard]] std::string gateway_cidr() const;  // "10.231.0.1/30"
};

// The lowest slot of `pool` that is not in `used` (slots past the pool's
// end, left from a larger pool, are ignored). Code "address_pool_exhausted"
// when every slot is taken.
Result<std::uint32_t> allocate_slot(const AddressPool& pool, const std::set<std::uint32_t>& used);

// Code "bad_slot" when the slot is past the pool's end (a record written
// under a larger pool).
Result<SandboxAddress> address_of(const AddressPool& pool, std::uint32_t slot);

// Every sandbox interface (tap) is named with this prefix and its slot:
// "sbx0", "sbx17". The egress table and the DNS forwarder match the
// prefix, so no other interface on the host may use it.
inline constexpr std::string_view kInterfacePrefix = "sbx";
std::string interface_name(std::uint32_t slot);

}  // namespace sbx::sbxd::net

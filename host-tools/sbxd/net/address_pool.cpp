#include "host-tools/sbxd/net/address_pool.hpp"

#include <charconv>

namespace sbx::sbxd::net {
namespace {

constexpr std::string_view kBadCidr = "bad_cidr";
constexpr int kMinPoolPrefix = 8;
constexpr std::uint32_t kAddressesPerSandbox = 4;  // a /30

std::uint32_t mask_of(int prefix) {
    return prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix);
}

// A decimal number of at most `max_digits` digits with no sign and no
// leading zero (but "0" itself).
bool parse_decimal(std::string_view text, std::size_t max_digits, unsigned& out) {
    if (text.empty() || text.size() > max_digits || (text.size() > 1 && text[0] == '0')) {
        return false;
    }
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc{} && end == text.data() + text.size();
}

}  // namespace

Result<Ipv4Address> parse_ipv4(std::string_view text) {
    std::uint32_t value = 0;
    std::string_view rest = text;
    for (int i = 0; i < 4; ++i) {
        const auto dot = rest.find('.');
        if ((i < 3) == (dot == std::string_view::npos)) {
            return make_error("\"{}\" is not an IPv4 address like 10.231.0.1", text);
        }
        unsigned octet = 0;
        if (!parse_decimal(rest.substr(0, dot), 3, octet) || octet > 255) {
            return make_error("\"{}\" is not an IPv4 address like 10.231.0.1", text);
        }
        value = (value << 8) | octet;
        rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    }
    return Ipv4Address{value};
}

std::string format_ipv4(Ipv4Address address) {
    const std::uint32_t v = address.value;
    return fmt::format("{}.{}.{}.{}", v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
}

std::string Ipv4Cidr::to_string() const {
    return fmt::format("{}/{}", format_ipv4(network), prefix);
}

bool Ipv4Cidr::contains(Ipv4Address address) const {
    return (address.value & mask_of(prefix)) == network.value;
}

Result<Ipv4Cidr> parse_ipv4_cidr(std::string_view text) {
    const auto slash = text.find('/');
    if (slash == std::string_view::npos) {
        return make_coded_error(kBadCidr, "\"{}\" is not a network like 10.231.0.0/16 (no /PREFIX)", text);
    }
    auto address = parse_ipv4(text.substr(0, slash));
    if (!address) {
        return address.error().context(fmt::format("network \"{}\"", text)).with_code(kBadCidr);
    }
    unsigned prefix = 0;
    if (!parse_decimal(text.substr(slash + 1), 2, prefix) || prefix > 32) {
        return make_coded_error(kBadCidr, "network \"{}\": the prefix length must be 0 to 32", text);
    }
    const int p = static_cast<int>(prefix);
    if ((address->value & ~mask_of(p)) != 0) {
        return make_coded_error(kBadCidr, "network \"{}\" has host bits set; did you mean {}?", text,
                                Ipv4Cidr{Ipv4Address{address->value & mask_of(p)}, p}.to_string());
    }
    return Ipv4Cidr{*address, p};
}

Result<AddressPool> AddressPool::parse(std::string_view text) {
    auto cidr = parse_ipv4_cidr(text);
    if (!cidr) {
        return cidr.error().context("address pool");
    }
    if (cidr->prefix < kMinPoolPrefix || cidr->prefix > kSandboxPrefix) {
        return make_coded_error(kBadCidr,
                                "address pool {}: the prefix length must be {} to {} (one /{} per sandbox)",
                                cidr->to_string(), kMinPoolPrefix, kSandboxPrefix, kSandboxPrefix);
    }
    return AddressPool{*cidr};
}

std::uint32_t AddressPool::slot_count() const {
    return std::uint32_t{1} << (kSandboxPrefix - cidr.prefix);
}

std::string SandboxAddress::guest_cidr() const {
    return fmt::format("{}/{}", format_ipv4(guest), kSandboxPrefix);
}

std::string SandboxAddress::gateway_cidr() const {
    return fmt::format("{}/{}", format_ipv4(gateway), kSandboxPrefix);
}

Result<std::uint32_t> allocate_slot(const AddressPool& pool, const std::set<std::uint32_t>& used) {
    std::uint32_t candidate = 0;
    for (std::uint32_t slot : used) {  // ascending: the first gap is the lowest free slot
        if (slot != candidate) {
            break;
        }
        ++candidate;
    }
    if (candidate >= pool.slot_count()) {
        return make_coded_error("address_pool_exhausted",
                                "address pool {}: all {} sandbox networks are in use", pool.cidr.to_string(),
                                pool.slot_count());
    }
    return candidate;
}

Result<SandboxAddress> address_of(const AddressPool& pool, std::uint32_t slot) {
    if (slot >= pool.slot_count()) {
        return make_coded_error("bad_slot", "slot {} is past the end of address pool {} ({} slots)", slot,
                                pool.cidr.to_string(), pool.slot_count());
    }
    const std::uint32_t network = pool.cidr.network.value + kAddressesPerSandbox * slot;
    return SandboxAddress{slot, Ipv4Address{network}, Ipv4Address{network + 1}, Ipv4Address{network + 2}};
}

std::string interface_name(std::uint32_t slot) {
    return fmt::format("{}{}", kInterfacePrefix, slot);
}

}  // namespace sbx::sbxd::net

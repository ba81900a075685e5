#include "base/mac_address.hpp"

#include <sys/random.h>

#include <cerrno>

#include "base/hex.hpp"

namespace sbx {
namespace {

constexpr std::uint8_t kMulticastBit = 0x01;
constexpr std::uint8_t kLocalBit = 0x02;

}  // namespace

Result<MacAddress> parse_mac(std::string_view text) {
    constexpr std::size_t kTextLength = 17;  // six pairs of hex digits, five colons
    auto bad = [&] {
        return make_error("MAC address \"{}\" is not six colon-separated hex octets like 52:54:00:12:34:56",
                          text);
    };
    if (text.size() != kTextLength) {
        return bad();
    }
    MacAddress mac{};
    for (std::size_t i = 0; i < mac.size(); ++i) {
        const std::size_t at = 3 * i;
        if (i > 0 && text[at - 1] != ':') {
            return bad();
        }
        const int hi = hex_digit_value(text[at]);
        const int lo = hex_digit_value(text[at + 1]);
        if (hi < 0 || lo < 0) {
            return bad();
        }
        mac[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    if ((mac[0] & kMulticastBit) != 0) {
        return make_error(
            "MAC address {} is a multicast address (the first octet is odd); a NIC needs a unicast one",
            text);
    }
    if (mac == MacAddress{}) {
        return make_error("MAC address {} is all zeros, which is not a valid station address", text);
    }
    return mac;
}

std::string format_mac(const MacAddress& mac) {
    return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", mac[0], mac[1], mac[2], mac[3], mac[4],
                       mac[5]);
}

Result<MacAddress> random_local_mac() {
    MacAddress mac{};
    // getrandom(2): requests of up to 256 bytes are never returned short.
    if (::getrandom(mac.data(), mac.size(), 0) != static_cast<ssize_t>(mac.size())) {
        return sys_error("getrandom for a MAC address");
    }
    mac[0] = static_cast<std::uint8_t>((mac[0] & ~kMulticastBit) | kLocalBit);
    return mac;
}

}  // namespace sbx

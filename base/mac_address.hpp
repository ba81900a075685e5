// Ethernet MAC addresses (IEEE 802): the textual form users type, and a
// random one when they type none. One type for virtio-net's configuration
// space (virtio 1.2 §5.1.4), the VMM's flags and the guest agent's identity op.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx {

using MacAddress = std::array<std::uint8_t, 6>;

// "52:54:00:12:34:56" (hex digits in either case). Refuses other shapes,
// multicast addresses (bit 0 of the first octet: a NIC's own address is
// unicast) and the all-zero address.
Result<MacAddress> parse_mac(std::string_view text);
// Lower-case "xx:xx:xx:xx:xx:xx".
std::string format_mac(const MacAddress& mac);
// A random unicast address with the locally administered bit (bit 1 of the
// first octet) set, so it cannot clash with a vendor-assigned one.
Result<MacAddress> random_local_mac();

}  // namespace sbx

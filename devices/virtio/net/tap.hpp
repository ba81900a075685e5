// The host side of virtio-net: a Linux tap interface (the kernel's
// Documentation/networking/tuntap.rst) opened with IFF_VNET_HDR, so every
// read and write carries the same 12-byte virtio_net_hdr_v1 the guest puts
// in front of each frame (virtio 1.2 §5.1.6) and no copy is needed between
// the queue and the tap.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/unique_fd.hpp"

namespace sbx::virtio {

// struct virtio_net_hdr_v1 (§5.1.6): with VIRTIO_F_VERSION_1 the header
// always has num_buffers, mergeable receive buffers or not.
inline constexpr std::size_t kNetHeaderSize = 12;
inline constexpr std::size_t kNetHeaderNumBuffersOffset = 10;

// Offload flags for TUNSETOFFLOAD: what the tap may hand us (and so the
// guest) — partial checksums, TSO super-packets.
inline constexpr unsigned kTapOffloadCsum = 0x01;    // TUN_F_CSUM
inline constexpr unsigned kTapOffloadTso4 = 0x02;    // TUN_F_TSO4
inline constexpr unsigned kTapOffloadTso6 = 0x04;    // TUN_F_TSO6
inline constexpr unsigned kTapOffloadTsoEcn = 0x08;  // TUN_F_TSO_ECN

// A Linux interface name: 1 to IFNAMSIZ-1 characters, none of '/', ':',
// '%' (a name template) or white space, and not "." or "..".
Result<void> check_interface_name(std::string_view name);

// Opens /dev/net/tun (non-blocking, close-on-exec) and attaches it to tap
// `name` with IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, which creates the tap when
// the process has CAP_NET_ADMIN; sets the vnet header size to 12 and turns
// every offload off until a driver accepts some. Errors name the tap and
// say what to do.
Result<UniqueFd> open_tap(std::string_view name);

// Whether fd is a tun/tap file descriptor attached to an interface.
bool is_tap(int fd);

// Prepares a tap opened elsewhere the way open_tap does (it must be a tap
// with IFF_VNET_HDR and without packet information).
Result<void> configure_tap(int fd, std::string_view name);

Result<void> set_tap_offloads(int fd, unsigned offloads);

}  // namespace sbx::virtio

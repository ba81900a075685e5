// The IPv4 part of rtnetlink (RFC 3549 §2.3.3; linux/rtnetlink.h,
// linux/if_addr.h) that the identity op needs: list, add and delete an
// interface's IPv4 addresses, list the main table's routes, replace the
// default route and delete a route, each request acknowledged (NLM_F_ACK)
// and its error read back with the kernel's extended ACK text.
//
// Plain AF_NETLINK rather than a library, on purpose: sbx-agent is one
// static binary (the minimal image has nothing else but busybox, no
// dynamic loader), and Debian ships libmnl only as a shared library, while
// libnl-route-3's static archive would add ~480 KB to a ~3 MB agent,
// glibc's static-NSS link warnings (getaddrinfo, getprotobyname) and the
// LGPL-2.1's relinking terms for a static link, for what here is six
// fixed-format messages. The MAC change next door uses plain
// ioctls (netdevice(7)) for the same reason.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "guest-agent/identity/ipv4_fields.hpp"

namespace sbx::agent::rtnl {

// One RTM_NEWADDR of a dump: IFA_LOCAL (the interface's own address; the
// same as IFA_ADDRESS unless it has a point-to-point peer) with the prefix length.
struct AddressEntry {
    int ifindex = 0;
    Ipv4Prefix local;
    Ipv4Address address;  // IFA_ADDRESS: the peer, or the local address again
    auto operator<=>(const AddressEntry&) const = default;
};

// One RTM_NEWROUTE of a dump.
struct RouteEntry {
    std::uint32_t table = 0;  // RTA_TABLE, else rtm_table
    Ipv4Address destination;  // RTA_DST (0.0.0.0 when absent)
    int destination_length = 0;
    std::uint8_t tos = 0;
    std::uint8_t type = 0;  // RTN_*
    std::uint8_t protocol = 0;
    std::optional<Ipv4Address> gateway;  // RTA_GATEWAY
    int oif = 0;                         // RTA_OIF; 0: none (multipath, blackhole, ...)
    std::uint32_t metric = 0;            // RTA_PRIORITY
    bool multipath = false;              // RTA_MULTIPATH: the next hops are not in gateway/oif
    auto operator<=>(const RouteEntry&) const = default;
};

// A NETLINK_ROUTE socket (netlink(7), rtnetlink(7)). Every reply must come
// from the kernel (port 0) with this request's sequence number; a reply
// that takes longer than `timeout_ms` is an error (ETIMEDOUT).
class Socket {
public:
    [[nodiscard]] static Result<Socket> open(int timeout_ms = 5000);

    [[nodiscard]] Result<std::vector<AddressEntry>> ipv4_addresses(int ifindex);
    // RTM_NEWADDR with NLM_F_CREATE | NLM_F_REPLACE: adds the address or,
    // if the interface has it already, keeps it (permanent, no lifetime).
    // IFA_BROADCAST is the network's broadcast address when the prefix is ≤ 30.
    [[nodiscard]] Result<void> add_ipv4_address(int ifindex, const Ipv4Prefix& address);
    // RTM_DELADDR of exactly this entry (IFA_LOCAL, IFA_ADDRESS, prefix length).
    [[nodiscard]] Result<void> delete_ipv4_address(const AddressEntry& entry);

    // Every IPv4 route of `table` (RT_TABLE_MAIN is 254).
    [[nodiscard]] Result<std::vector<RouteEntry>> ipv4_routes(std::uint32_t table);
    // RTM_NEWROUTE 0.0.0.0/0 via `gateway` dev `ifindex` in the main table,
    // metric 0, proto static, with NLM_F_CREATE | NLM_F_REPLACE: it takes the
    // place of a default route of the same metric and TOS, or is added.
    [[nodiscard]] Result<void> replace_ipv4_default_route(int ifindex, Ipv4Address gateway);
    // RTM_DELROUTE matching this entry's table, destination, TOS, metric and
    // (when it has them) gateway and interface.
    [[nodiscard]] Result<void> delete_route(const RouteEntry& route);

private:
    explicit Socket(UniqueFd fd, std::uint32_t port_id) : fd_(std::move(fd)), port_id_(port_id) {}
    // Sends `message` (its header's length, sequence and port are filled in)
    // and reads until the ACK; an NLMSG_ERROR with an error is an Error
    // naming `what` with the errno and the kernel's extended ACK message.
    [[nodiscard]] Result<void> request(std::vector<std::uint8_t> message, std::string_view what);
    // Sends a NLM_F_DUMP request and returns each reply message of type
    // `type` (header included) up to NLMSG_DONE; a dump the kernel marks
    // inconsistent (NLM_F_DUMP_INTR: the table changed meanwhile) is redone.
    [[nodiscard]] Result<std::vector<std::vector<std::uint8_t>>> dump(std::vector<std::uint8_t> message,
                                                                      std::uint16_t type,
                                                                      std::string_view what);
    [[nodiscard]] Result<void> send(std::vector<std::uint8_t>& message, std::string_view what);
    [[nodiscard]] Result<std::span<const std::uint8_t>> receive(std::string_view what);

    UniqueFd fd_;
    std::uint32_t port_id_ = 0;
    std::uint32_t sequence_ = 0;
    std::vector<std::uint8_t> buffer_;
};

// The parsers the socket uses, for tests: a whole netlink message (header
// and payload); nothing if it is not an IPv4 one or is malformed.
[[nodiscard]] std::optional<AddressEntry> parse_address_message(std::span<const std::uint8_t> message);
[[nodiscard]] std::optional<RouteEntry> parse_route_message(std::span<const std::uint8_t> message);
// An NLMSG_ERROR message: its error (0 for an ACK, else -errno) and the
// extended ACK's NLMSGERR_ATTR_MSG ("" if none); nothing if malformed.
struct Ack {
    int error = 0;
    std::uint32_t sequence = 0;
    std::string message;
};
[[nodiscard]] std::optional<Ack> parse_ack(std::span<const std::uint8_t> message);

}  // namespace sbx::agent::rtnl

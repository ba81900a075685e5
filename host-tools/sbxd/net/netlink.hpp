// The few rtnetlink operations (rtnetlink(7), RFC 3549) the host network
// needs, over libnl-route-3: a link's state, its IPv4 addresses, deleting
// it, and the interface of the IPv4 default route. Each RouteSocket owns
// one NETLINK_ROUTE socket; it is not shared between threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/net/address_pool.hpp"

struct nl_sock;

namespace sbx::sbxd::net {

struct LinkInfo {
    int index = 0;
    std::string kind;       // IFLA_INFO_KIND: "tun", "veth"...; empty for a device without one
    unsigned flags = 0;     // IFF_UP, IFF_RUNNING... (netdevice(7))
    unsigned arp_type = 0;  // ARPHRD_ETHER, ARPHRD_NONE...
};

struct InterfaceAddress {
    Ipv4Address local;
    int prefix = 0;
    friend bool operator==(const InterfaceAddress&, const InterfaceAddress&) = default;
};

class RouteSocket {
public:
    static Result<RouteSocket> open();

    // Code "no_such_interface" when there is no interface of that name.
    Result<LinkInfo> link(std::string_view name);
    Result<bool> link_exists(std::string_view name);
    Result<void> set_up(std::string_view name);
    // Deletes the interface (RTM_DELLINK); nothing when there is none.
    Result<void> delete_link(std::string_view name);

    Result<std::vector<InterfaceAddress>> ipv4_addresses(std::string_view name);
    // Makes `address` the interface's only IPv4 address: adds it (the
    // kernel adds the prefix route with it) and removes any other.
    Result<void> set_only_ipv4_address(std::string_view name, InterfaceAddress address);
    // Nothing when the interface or the address is not there.
    Result<void> remove_ipv4_address(std::string_view name, InterfaceAddress address);

    // The interface of the IPv4 default route in the main table (the one
    // with the lowest metric when there are several). Code "no_uplink".
    Result<std::string> default_route_interface();

private:
    struct Free {
        void operator()(nl_sock* sock) const;
    };
    explicit RouteSocket(nl_sock* sock) : sock_(sock) {}
    std::unique_ptr<nl_sock, Free> sock_;
};

// Kernel settings under /proc/sys (the files are per network namespace).
// net.ipv4.ip_forward = 1: the host routes between its interfaces
// (Documentation/networking/ip-sysctl.rst); it also sets every interface's
// forwarding, present and future.
Result<void> enable_ipv4_forwarding();
// net.ipv6.conf.NAME.disable_ipv6 = 1: no IPv6 address (not even a
// link-local one) on the interface. Nothing when the kernel has no IPv6.
Result<void> disable_ipv6(std::string_view interface);

}  // namespace sbx::sbxd::net

#include "host-tools/sbxd/net/netlink.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/nexthop.h>
#include <netlink/route/route.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>

#include "base/unique_fd.hpp"

namespace sbx::sbxd::net {
namespace {

// libnl returns negative NLE_* codes; the kernel's ENODEV arrives as
// NLE_OBJ_NOTFOUND (or NLE_NODEV).
bool is_not_found(int err) {
    return err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV;
}

Error nl_failure(std::string_view what, int err) {
    return make_coded_error("netlink", "{}: {}", what, nl_geterror(err));
}

struct LinkFree {
    void operator()(rtnl_link* link) const { rtnl_link_put(link); }
};
using LinkPtr = std::unique_ptr<rtnl_link, LinkFree>;
struct AddrFree {
    void operator()(rtnl_addr* addr) const { rtnl_addr_put(addr); }
};
using AddrPtr = std::unique_ptr<rtnl_addr, AddrFree>;
struct NlAddrFree {
    void operator()(nl_addr* addr) const { nl_addr_put(addr); }
};
using NlAddrPtr = std::unique_ptr<nl_addr, NlAddrFree>;
struct CacheFree {
    void operator()(nl_cache* cache) const { nl_cache_free(cache); }
};
using CachePtr = std::unique_ptr<nl_cache, CacheFree>;

Result<LinkPtr> get_link(nl_sock* sock, std::string_view name) {
    const std::string n(name);
    rtnl_link* link = nullptr;
    if (int err = rtnl_link_get_kernel(sock, 0, n.c_str(), &link); err < 0) {
        if (is_not_found(err)) {
            return make_coded_error("no_such_interface", "there is no interface {}", name);
        }
        return nl_failure(fmt::format("interface {}", name), err);
    }
    return LinkPtr(link);
}

Result<NlAddrPtr> to_nl_addr(InterfaceAddress address) {
    const std::uint32_t be = htonl(address.local.value);
    NlAddrPtr addr(nl_addr_build(AF_INET, &be, sizeof be));
    if (!addr) {
        return make_error("out of memory for a netlink address");
    }
    nl_addr_set_prefixlen(addr.get(), address.prefix);
    return addr;
}

std::optional<InterfaceAddress> from_rtnl_addr(rtnl_addr* addr) {
    nl_addr* local = rtnl_addr_get_local(addr);
    if (rtnl_addr_get_family(addr) != AF_INET || local == nullptr || nl_addr_get_len(local) != 4) {
        return std::nullopt;
    }
    std::uint32_t be = 0;
    std::memcpy(&be, nl_addr_get_binary_addr(local), sizeof be);
    return InterfaceAddress{Ipv4Address{ntohl(be)}, rtnl_addr_get_prefixlen(addr)};
}

Result<AddrPtr> make_rtnl_addr(int index, InterfaceAddress address) {
    auto local = to_nl_addr(address);
    if (!local) {
        return local.error();
    }
    AddrPtr addr(rtnl_addr_alloc());
    if (!addr) {
        return make_error("out of memory for a netlink address");
    }
    rtnl_addr_set_ifindex(addr.get(), index);
    rtnl_addr_set_family(addr.get(), AF_INET);
    if (int err = rtnl_addr_set_local(addr.get(), local->get()); err < 0) {  // takes its own reference
        return nl_failure("address", err);
    }
    return addr;
}

std::string describe(InterfaceAddress address) {
    return fmt::format("{}/{}", format_ipv4(address.local), address.prefix);
}

Result<void> write_proc_file(const std::string& path, std::string_view value, bool missing_ok) {
    auto fd = UniqueFd::open(path, O_WRONLY | O_TRUNC);
    if (!fd) {
        if (missing_ok && fd.error().errno_value == ENOENT) {
            return ok();
        }
        return fd.error();
    }
    return write_all(fd->get(), value.data(), value.size());
}

}  // namespace

void RouteSocket::Free::operator()(nl_sock* sock) const {
    nl_socket_free(sock);
}

Result<RouteSocket> RouteSocket::open() {
    nl_sock* sock = nl_socket_alloc();
    if (sock == nullptr) {
        return make_error("out of memory for a netlink socket");
    }
    RouteSocket socket(sock);
    if (int err = nl_connect(sock, NETLINK_ROUTE); err < 0) {
        return nl_failure("connecting a NETLINK_ROUTE socket", err);
    }
    // libnl opens its socket without close-on-exec; dnsmasq and the VMMs
    // are spawned from this process.
    if (::fcntl(nl_socket_get_fd(sock), F_SETFD, FD_CLOEXEC) != 0) {
        return sys_error("netlink socket: F_SETFD");
    }
    return socket;
}

Result<LinkInfo> RouteSocket::link(std::string_view name) {
    auto link = get_link(sock_.get(), name);
    if (!link) {
        return link.error();
    }
    const char* kind = rtnl_link_get_type(link->get());
    return LinkInfo{rtnl_link_get_ifindex(link->get()), kind == nullptr ? "" : kind,
                    rtnl_link_get_flags(link->get()), rtnl_link_get_arptype(link->get())};
}

Result<bool> RouteSocket::link_exists(std::string_view name) {
    auto info = link(name);
    if (!info) {
        if (info.error().code == "no_such_interface") {
            return false;
        }
        return info.error();
    }
    return true;
}

Result<void> RouteSocket::set_up(std::string_view name) {
    auto link = get_link(sock_.get(), name);
    if (!link) {
        return link.error();
    }
    LinkPtr change(rtnl_link_alloc());
    if (!change) {
        return make_error("out of memory for a netlink link");
    }
    rtnl_link_set_flags(change.get(), IFF_UP);
    if (int err = rtnl_link_change(sock_.get(), link->get(), change.get(), 0); err < 0) {
        return nl_failure(fmt::format("setting {} up", name), err);
    }
    return ok();
}

Result<void> RouteSocket::delete_link(std::string_view name) {
    LinkPtr link(rtnl_link_alloc());
    if (!link) {
        return make_error("out of memory for a netlink link");
    }
    const std::string n(name);
    rtnl_link_set_name(link.get(), n.c_str());
    if (int err = rtnl_link_delete(sock_.get(), link.get()); err < 0 && !is_not_found(err)) {
        return nl_failure(fmt::format("deleting {}", name), err);
    }
    return ok();
}

Result<std::vector<InterfaceAddress>> RouteSocket::ipv4_addresses(std::string_view name) {
    auto info = link(name);
    if (!info) {
        return info.error();
    }
    nl_cache* raw = nullptr;
    if (int err = rtnl_addr_alloc_cache(sock_.get(), &raw); err < 0) {
        return nl_failure("listing addresses", err);
    }
    CachePtr cache(raw);
    std::vector<InterfaceAddress> out;
    for (nl_object* obj = nl_cache_get_first(cache.get()); obj != nullptr; obj = nl_cache_get_next(obj)) {
        auto* addr = reinterpret_cast<rtnl_addr*>(obj);  // NOLINT: libnl's object model
        if (rtnl_addr_get_ifindex(addr) != info->index) {
            continue;
        }
        if (auto a = from_rtnl_addr(addr)) {
            out.push_back(*a);
        }
    }
    return out;
}

Result<void> RouteSocket::set_only_ipv4_address(std::string_view name, InterfaceAddress address) {
    auto info = link(name);
    if (!info) {
        return info.error();
    }
    auto existing = ipv4_addresses(name);
    if (!existing) {
        return existing.error();
    }
    for (const auto& other : *existing) {
        if (other != address) {
            if (auto r = remove_ipv4_address(name, other); !r) {
                return r;
            }
        }
    }
    auto addr = make_rtnl_addr(info->index, address);
    if (!addr) {
        return addr.error();
    }
    // NLM_F_REPLACE: the same address again is not an error.
    if (int err = rtnl_addr_add(sock_.get(), addr->get(), NLM_F_REPLACE); err < 0) {
        return nl_failure(fmt::format("adding {} to {}", describe(address), name), err);
    }
    return ok();
}

Result<void> RouteSocket::remove_ipv4_address(std::string_view name, InterfaceAddress address) {
    auto info = link(name);
    if (!info) {
        return info.error().code == "no_such_interface" ? ok() : Result<void>(info.error());
    }
    auto addr = make_rtnl_addr(info->index, address);
    if (!addr) {
        return addr.error();
    }
    // EADDRNOTAVAIL (NLE_NOADDR) when the address is not there.
    if (int err = rtnl_addr_delete(sock_.get(), addr->get(), 0);
        err < 0 && err != -NLE_NOADDR && !is_not_found(err)) {
        return nl_failure(fmt::format("removing {} from {}", describe(address), name), err);
    }
    return ok();
}

Result<std::string> RouteSocket::default_route_interface() {
    nl_cache* raw = nullptr;
    if (int err = rtnl_route_alloc_cache(sock_.get(), AF_INET, 0, &raw); err < 0) {
        return nl_failure("listing routes", err);
    }
    CachePtr cache(raw);
    int best_index = 0;
    std::uint32_t best_metric = std::numeric_limits<std::uint32_t>::max();
    for (nl_object* obj = nl_cache_get_first(cache.get()); obj != nullptr; obj = nl_cache_get_next(obj)) {
        auto* route = reinterpret_cast<rtnl_route*>(obj);  // NOLINT: libnl's object model
        nl_addr* dst = rtnl_route_get_dst(route);
        if (rtnl_route_get_table(route) != RT_TABLE_MAIN || rtnl_route_get_type(route) != RTN_UNICAST ||
            (dst != nullptr && nl_addr_get_prefixlen(dst) != 0) || rtnl_route_get_nnexthops(route) < 1) {
            continue;
        }
        const int index = rtnl_route_nh_get_ifindex(rtnl_route_nexthop_n(route, 0));
        if (index > 0 && (best_index == 0 || rtnl_route_get_priority(route) < best_metric)) {
            best_index = index;
            best_metric = rtnl_route_get_priority(route);
        }
    }
    if (best_index == 0) {
        return make_coded_error("no_uplink",
                                "there is no IPv4 default route to take the uplink from; "
                                "name the uplink interface");
    }
    rtnl_link* link = nullptr;
    if (int err = rtnl_link_get_kernel(sock_.get(), best_index, nullptr, &link); err < 0) {
        return nl_failure(fmt::format("the default route's interface (index {})", best_index), err);
    }
    LinkPtr owned(link);
    return std::string(rtnl_link_get_name(link));
}

Result<void> enable_ipv4_forwarding() {
    if (auto r = write_proc_file("/proc/sys/net/ipv4/ip_forward", "1\n", false); !r) {
        return r.error().context("enabling IPv4 forwarding (net.ipv4.ip_forward)");
    }
    return ok();
}

Result<void> disable_ipv6(std::string_view interface) {
    if (auto r =
            write_proc_file(fmt::format("/proc/sys/net/ipv6/conf/{}/disable_ipv6", interface), "1\n", true);
        !r) {
        return r.error().context(fmt::format("disabling IPv6 on {}", interface));
    }
    return ok();
}

}  // namespace sbx::sbxd::net

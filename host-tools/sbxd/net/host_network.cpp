#include "host-tools/sbxd/net/host_network.hpp"

#include <net/if.h>

#include <cerrno>
#include <cstring>

#include "base/log.hpp"
#include "host-tools/sbxd/net/netlink.hpp"

namespace sbx::sbxd::net {
namespace {

Result<std::string> find_uplink(const std::string& named) {
    auto socket = RouteSocket::open();
    if (!socket) {
        return socket.error();
    }
    if (!named.empty()) {
        auto info = socket->link(named);
        if (!info) {
            return info.error().context("uplink");
        }
        return named;
    }
    return socket->default_route_interface();
}

Result<std::vector<Ipv4Address>> parse_upstreams(const std::vector<std::string>& texts) {
    std::vector<Ipv4Address> out;
    for (const auto& text : texts) {
        auto address = parse_ipv4(text);
        if (!address) {
            return address.error().context("DNS upstream").with_code("bad_request");
        }
        out.push_back(*address);
    }
    return out;
}

EgressMember member_of(const SandboxNet& net) {
    return egress_member(net.address, net.egress);
}

SandboxNet describe(const SandboxAddress& address, const MacAddress& mac, const Egress& egress) {
    return SandboxNet{address.slot,
                      interface_name(address.slot),
                      mac,
                      address,
                      address.guest_cidr(),
                      format_ipv4(address.gateway),
                      format_ipv4(address.gateway),
                      egress};
}

// The sandbox interfaces (named kInterfacePrefix...) of this network
// namespace that have an IPv4 address, or whose addresses cannot be read
// (counted in: the caller then keeps the policy).
std::vector<std::string> routed_sandbox_interfaces() {
    std::vector<std::string> out;
    struct if_nameindex* names = ::if_nameindex();  // RTM_GETLINK: this namespace's
    if (names == nullptr) {
        log::warn("listing the interfaces: {}", std::strerror(errno));
        return {"(unknown)"};
    }
    auto socket = RouteSocket::open();
    for (const struct if_nameindex* n = names; n->if_index != 0 && n->if_name != nullptr; ++n) {
        const std::string_view name(n->if_name);
        if (!name.starts_with(kInterfacePrefix)) {
            continue;
        }
        auto addresses =
            socket ? socket->ipv4_addresses(name) : Result<std::vector<InterfaceAddress>>(socket.error());
        if (!addresses ? addresses.error().code != "no_such_interface" : !addresses->empty()) {
            out.emplace_back(name);
        }
    }
    ::if_freenameindex(names);
    return out;
}

}  // namespace

Result<std::unique_ptr<HostNetwork>> HostNetwork::open(HostNetworkConfig config) {
    auto pool = AddressPool::parse(config.pool);
    if (!pool) {
        return pool.error();
    }
    auto upstreams = parse_upstreams(config.dns_upstreams);
    if (!upstreams) {
        return upstreams.error();
    }
    if (config.state_dir.empty()) {
        return make_coded_error("bad_request", "the host network needs a state directory");
    }
    auto uplink = find_uplink(config.uplink);
    if (!uplink) {
        return uplink.error();
    }
    EgressPolicy policy{pool->cidr, *uplink};
    // The policy before forwarding: no sandbox packet is routed unfiltered.
    auto table = EgressTable::create(policy);
    if (!table) {
        return table.error();
    }
    if (auto r = enable_ipv4_forwarding(); !r) {
        return r.error();
    }
    DnsConfig dns_config;
    dns_config.program = config.dnsmasq;
    dns_config.state_dir = config.state_dir;
    dns_config.upstreams = std::move(*upstreams);
    dns_config.log_queries = config.log_dns_queries;
    dns_config.rebind_ok_domains = config.dns_rebind_ok;
    auto dns = DnsForwarder::start(std::move(dns_config));
    if (!dns) {
        return dns.error();
    }
    return std::unique_ptr<HostNetwork>(
        new HostNetwork(*pool, std::move(policy), std::move(*table), std::move(*dns)));
}

HostNetwork::~HostNetwork() {
    std::lock_guard lock(mutex_);
    if (!released_) {
        teardown();
    }
}

void HostNetwork::teardown() {
    // Taps before the table: no sandbox interface outlives its policy.
    for (auto& [slot, attached] : attached_) {
        if (auto r = table_.remove(member_of(attached.net)); !r) {
            log::warn("{}", r.error().to_string());
        }
        if (attached.tap) {
            if (auto r = attached.tap->remove(); !r) {
                log::warn("{}", r.error().to_string());
            }
        } else if (auto socket = RouteSocket::open()) {
            (void)socket->remove_ipv4_address(attached.net.tap,
                                              {attached.net.address.gateway, kSandboxPrefix});
        }
    }
    attached_.clear();
    // Nor one this HostNetwork never attached: the tap of a VMM that an
    // earlier sbxd left running, not adopted yet (a start that failed
    // between open() and adopt()), has its gateway address and route
    // still. Without the table its guest would reach the host and be
    // routed unfiltered; with it, its packets are dropped (the table
    // open() made has no element for it) until an sbxd adopts it.
    if (auto live = routed_sandbox_interfaces(); !live.empty()) {
        log::warn("the egress table stays: {} sandbox interface(s) not attached here still route ({}{})",
                  live.size(), live.front(), live.size() > 1 ? ", ..." : "");
        table_.release();
    } else if (auto r = table_.destroy(); !r) {
        log::warn("{}", r.error().to_string());
    }
    dns_.stop();
}

void HostNetwork::release() {
    std::lock_guard lock(mutex_);
    for (auto& [slot, attached] : attached_) {
        if (attached.tap) {
            attached.tap->release();
        }
    }
    attached_.clear();
    table_.release();
    dns_.release();
    released_ = true;
}

Result<HostNetwork::Attached> HostNetwork::bring_up(std::uint32_t slot, const MacAddress& mac, const Egress& egress,
                                                    std::optional<PersistentTap> tap) {
    auto address = address_of(pool_, slot);
    if (!address) {
        return address.error();
    }
    const std::string name = interface_name(slot);
    auto socket = RouteSocket::open();
    if (!socket) {
        return socket.error();
    }
    // The guest gets IPv4 only; without IPv6 the host's end has no
    // link-local address for dnsmasq to bind or a guest to reach.
    if (auto r = disable_ipv6(name); !r) {
        return r.error();
    }
    if (auto r = socket->set_only_ipv4_address(name, {address->gateway, kSandboxPrefix}); !r) {
        return r.error();
    }
    if (auto r = socket->set_up(name); !r) {
        return r.error();
    }
    return Attached{describe(*address, mac, egress), std::move(tap)};
}

Result<SandboxNet> HostNetwork::attach_locked(std::uint32_t slot, const AttachOptions& options,
                                              bool existing) {
    if (released_) {
        return make_error("the host network was released");
    }
    if (attached_.contains(slot)) {
        return make_coded_error("slot_in_use", "slot {} ({}) is attached already", slot,
                                interface_name(slot));
    }
    if (auto address = address_of(pool_, slot); !address) {
        return address.error();
    }
    MacAddress mac{};
    if (options.mac) {
        mac = *options.mac;
    } else {
        auto random = random_local_mac();
        if (!random) {
            return random.error();
        }
        mac = *random;
    }
    std::optional<PersistentTap> tap;
    if (existing) {
        auto socket = RouteSocket::open();
        if (!socket) {
            return socket.error();
        }
        if (auto info = socket->link(interface_name(slot)); !info) {
            return info.error();
        }
    } else {
        auto created = PersistentTap::create(interface_name(slot));
        if (!created) {
            return created.error();
        }
        tap = std::move(*created);
    }
    auto attached = bring_up(slot, mac, options.egress, std::move(tap));  // on failure the tap goes with it
    if (!attached) {
        return attached.error().context(interface_name(slot));
    }
    if (auto r = table_.add(member_of(attached->net)); !r) {
        return r.error();
    }
    SandboxNet net = attached->net;
    attached_.emplace(slot, std::move(*attached));
    return net;
}

Result<SandboxNet> HostNetwork::attach(std::uint32_t slot, const AttachOptions& options) {
    std::lock_guard lock(mutex_);
    return attach_locked(slot, options, false);
}

Result<SandboxNet> HostNetwork::attach_existing(std::uint32_t slot, const AttachOptions& options) {
    std::lock_guard lock(mutex_);
    return attach_locked(slot, options, true);
}

Result<void> HostNetwork::detach(std::uint32_t slot) {
    std::lock_guard lock(mutex_);
    if (released_) {
        return make_error("the host network was released");
    }
    auto address = address_of(pool_, slot);
    if (!address) {
        return address.error();
    }
    auto it = attached_.find(slot);
    // The elements first: from here on its packets are dropped.
    const EgressMember member =
        it != attached_.end() ? member_of(it->second.net) : egress_member(*address, Egress{});
    if (auto r = table_.remove(member); !r) {
        return r;
    }
    if (it == attached_.end()) {
        // Not attached here (an adopt that failed, a record from before a
        // crash): a tap of that name is removed; any other interface is not ours.
        auto tap = is_tap(interface_name(slot));
        if (tap && *tap) {
            auto owned = PersistentTap::adopt(interface_name(slot));
            return owned ? owned->remove() : Result<void>(owned.error());
        }
        return ok();
    }
    Result<void> result = ok();
    if (it->second.tap) {
        result = it->second.tap->remove();
    } else {
        auto socket = RouteSocket::open();
        result = socket ? socket->remove_ipv4_address(it->second.net.tap, {address->gateway, kSandboxPrefix})
                        : Result<void>(socket.error());
    }
    attached_.erase(it);
    return result;
}

Result<void> HostNetwork::set_egress(std::uint32_t slot, const Egress& egress) {
    std::lock_guard lock(mutex_);
    auto it = attached_.find(slot);
    if (it == attached_.end()) {
        return make_coded_error("not_attached", "slot {} is not attached", slot);
    }
    SandboxNet changed = it->second.net;
    changed.egress = egress;
    if (auto r = table_.change(member_of(it->second.net), member_of(changed)); !r) {
        return r;
    }
    it->second.net = changed;
    return ok();
}

AdoptReport HostNetwork::adopt(std::span<const Adoption> sandboxes) {
    std::lock_guard lock(mutex_);
    AdoptReport report;
    if (released_) {
        return report;
    }
    for (const auto& s : sandboxes) {
        auto fail = [&](const Error& e) {
            report.failed.emplace_back(s.slot, e.context(interface_name(s.slot)));
        };
        if (attached_.contains(s.slot)) {
            fail(make_coded_error("slot_in_use", "slot {} is attached already", s.slot));
            continue;
        }
        if (auto address = address_of(pool_, s.slot); !address) {
            fail(address.error());
            continue;
        }
        std::optional<PersistentTap> owned;
        if (s.caller_interface) {
            auto socket = RouteSocket::open();
            auto info = socket ? socket->link(interface_name(s.slot)) : Result<LinkInfo>(socket.error());
            if (!info) {
                fail(info.error());
                continue;
            }
        } else {
            // The tap a running VMM holds; or, when it is gone (the host
            // rebooted, someone deleted it), a new one for the next start.
            auto tap = PersistentTap::adopt(interface_name(s.slot));
            if (!tap && tap.error().code == "no_such_interface") {
                tap = PersistentTap::create(interface_name(s.slot));
            }
            if (!tap) {
                fail(tap.error());
                continue;
            }
            owned = std::move(*tap);
        }
        auto attached = bring_up(s.slot, s.mac, s.egress, std::move(owned));
        if (!attached) {
            fail(attached.error());
            continue;
        }
        report.adopted.push_back(attached->net);
        attached_.emplace(s.slot, std::move(*attached));
    }
    std::vector<EgressMember> members;
    for (const auto& [slot, attached] : attached_) {
        members.push_back(member_of(attached.net));
    }
    if (auto r = table_.rebuild(policy_, members); !r) {
        // The table still holds what it held, so the sandboxes just
        // adopted have no network (their packets are dropped); their taps
        // stay for their VMMs, and a later adopt may take them again.
        for (const auto& net : report.adopted) {
            report.failed.emplace_back(net.slot, r.error());
            if (auto it = attached_.find(net.slot); it != attached_.end()) {
                if (it->second.tap) {
                    it->second.tap->release();
                }
                attached_.erase(it);
            }
        }
        report.adopted.clear();
    }
    return report;
}

std::optional<SandboxNet> HostNetwork::find(std::uint32_t slot) const {
    std::lock_guard lock(mutex_);
    auto it = attached_.find(slot);
    if (it == attached_.end()) {
        return std::nullopt;
    }
    return it->second.net;
}

Result<void> HostNetwork::check_dns_forwarder() {
    std::lock_guard lock(mutex_);
    if (released_) {
        return ok();
    }
    return dns_.restart_if_exited();
}

}  // namespace sbx::sbxd::net

#include "guest-agent/identity/ipv4_apply.hpp"

#include <net/if.h>

namespace sbx::agent {
namespace {

bool is_ours(const DefaultRoute& route, const std::string& ifname, Ipv4Address gateway) {
    return route.gateway == gateway && route.interface == ifname && route.metric == 0 && route.tos == 0;
}

std::string describe(const DefaultRoute& route) {
    std::string text = "default";
    if (route.gateway) {
        text += " via " + format_ipv4(*route.gateway);
    }
    if (!route.interface.empty()) {
        text += " dev " + route.interface;
    }
    if (route.metric != 0) {
        text += fmt::format(" metric {}", route.metric);
    }
    return text;
}

}  // namespace

Result<Ipv4Changes> apply_ipv4(IdentityKernel& kernel, const std::string& ifname, const Ipv4Config& config) {
    Ipv4Changes changes;
    auto flags = kernel.interface_flags(ifname);
    if (!flags) {
        return flags.error().context("bringing the link up");
    }
    if ((*flags & IFF_UP) == 0) {
        if (auto r = kernel.set_interface_flags(ifname, *flags | IFF_UP); !r) {
            return r.error().context("bringing the link up");
        }
        changes.link_brought_up = true;
    }

    auto addresses = kernel.ipv4_addresses(ifname);
    if (!addresses) {
        return addresses.error();
    }
    for (const auto& address : *addresses) {
        if (address == config.address) {
            continue;
        }
        if (auto r = kernel.delete_ipv4_address(ifname, address); !r) {
            return r.error();
        }
        changes.addresses_removed.push_back(address);
    }
    if (auto r = kernel.add_ipv4_address(ifname, config.address); !r) {
        return r.error();
    }

    if (auto r = kernel.replace_ipv4_default_route(ifname, config.gateway); !r) {
        return r.error();
    }
    auto routes = kernel.ipv4_default_routes();
    if (!routes) {
        return routes.error();
    }
    for (const auto& route : *routes) {
        if (is_ours(route, ifname, config.gateway)) {
            continue;
        }
        if (auto r = kernel.delete_ipv4_default_route(route); !r) {
            return r.error();
        }
        changes.routes_removed.push_back(route);
    }

    if (config.dns) {
        const std::string text = resolv_conf_text(*config.dns);
        auto current = kernel.read_resolv_conf();
        if (!current) {
            return current.error();
        }
        if (!current->exists || current->symlink || current->text != text) {
            if (auto r = kernel.write_resolv_conf(text); !r) {
                return r.error();
            }
            changes.resolv_conf_written = true;
            if (current->symlink) {
                changes.resolv_conf_link = current->target;
            }
        }
    }
    return changes;
}

Result<Ipv4State> read_ipv4(IdentityKernel& kernel, const std::string& ifname) {
    Ipv4State state;
    auto flags = kernel.interface_flags(ifname);
    if (!flags) {
        return flags.error();
    }
    state.link_up = (*flags & IFF_UP) != 0;
    auto addresses = kernel.ipv4_addresses(ifname);
    if (!addresses) {
        return addresses.error();
    }
    state.addresses = std::move(*addresses);
    auto routes = kernel.ipv4_default_routes();
    if (!routes) {
        return routes.error();
    }
    const DefaultRoute* best = nullptr;
    for (const auto& route : *routes) {
        if (route.interface == ifname && route.gateway && (best == nullptr || route.metric < best->metric)) {
            best = &route;
        }
    }
    if (best != nullptr) {
        state.gateway = best->gateway;
    }
    auto resolv = kernel.read_resolv_conf();
    if (!resolv) {
        return resolv.error();
    }
    state.dns = resolv_conf_nameservers(resolv->text);
    return state;
}

std::string describe_changes(const std::string& ifname, const Ipv4Config& config,
                             const Ipv4Changes& changes) {
    std::string text =
        fmt::format("{} {} via {}", ifname, format_ipv4_prefix(config.address), format_ipv4(config.gateway));
    if (changes.link_brought_up) {
        text += "; link brought up";
    }
    for (const auto& address : changes.addresses_removed) {
        text += "; removed " + format_ipv4_prefix(address);
    }
    for (const auto& route : changes.routes_removed) {
        text += "; removed " + describe(route);
    }
    if (changes.resolv_conf_written) {
        text += "; resolv.conf written";
    }
    if (changes.resolv_conf_link) {
        text += fmt::format(" (replacing the symbolic link to {})", *changes.resolv_conf_link);
    }
    return text;
}

}  // namespace sbx::agent

// A sandbox's network (docs/network.md) as the VMM driver gives it: a slot
// claimed in the store once for the sandbox's life (its tap name and /30),
// the tap attached on the host whenever a VMM starts, and the guest told
// its MAC, address, route and DNS through the identity op after every boot
// or restore. The tap goes when the sandbox is deleted. A warm template
// boots on a tap of its own outside every slot, which the egress table
// drops (it matches the sandbox interface prefix), and which goes when its
// VMM has saved it.
#include <set>

#include "base/log.hpp"
#include "base/mac_address.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"

namespace sbx::sbxd {

namespace {

// The stored policy; one that does not parse (a store edited by hand)
// fails closed.
net::Egress egress_of(const SandboxRecord& sandbox) {
    auto egress = net::parse_egress(sandbox.egress);
    if (!egress) {
        log::warn("sandbox {}: egress '{}' in the store: {}; it gets deny-all", sandbox.id, sandbox.egress,
                  egress.error().to_string());
        return net::Egress::deny_all();
    }
    return *egress;
}

}  // namespace

Result<std::optional<VmmDriver::Network>> VmmDriver::connect_network(const std::string& id) {
    if (config_.network == nullptr) {
        return std::optional<Network>();
    }
    auto sandbox = store_.get_sandbox(id);
    if (!sandbox) {
        return sandbox.error().with_code(api::code::kInternal);
    }
    std::optional<SandboxNetwork> claimed = sandbox->network;
    if (!claimed) {  // the first start: a slot and a MAC for its whole life
        auto mac = random_local_mac();
        if (!mac) {
            return mac.error();
        }
        const net::AddressPool& pool = config_.network->pool();
        auto claim = store_.claim_network(
            id, [&](const std::set<std::uint32_t>& used) { return net::allocate_slot(pool, used); },
            format_mac(*mac), clock_());
        if (!claim) {
            return claim.error().with_code(claim.error().code == "address_pool_exhausted"
                                               ? api::code::kCapacityExceeded
                                               : api::code::kInternal);
        }
        claimed = *claim;
    }
    auto known_mac = parse_mac(claimed->mac);
    if (!known_mac) {
        return known_mac.error().context(fmt::format("sandbox {}'s MAC", id)).with_code(api::code::kInternal);
    }
    std::optional<net::SandboxNet> attached = config_.network->find(claimed->slot);
    if (!attached) {
        auto made = config_.network->attach(claimed->slot, {*known_mac, egress_of(*sandbox)});
        if (!made) {
            return made.error().context("the sandbox's tap").with_code(api::code::kInternal);
        }
        attached = *made;
    }
    return std::optional<Network>(Network{
        NetAttachment{attached->tap, format_mac(attached->mac)},
        GuestNetwork{format_mac(attached->mac), attached->guest_cidr, attached->gateway, {attached->dns}},
    });
}

Result<void> VmmDriver::apply_egress(const SandboxRecord& sandbox) {
    if (config_.network == nullptr || !sandbox.network || !config_.network->find(sandbox.network->slot)) {
        return ok();  // no tap now: the next attach reads the store
    }
    if (auto r = config_.network->set_egress(sandbox.network->slot, egress_of(sandbox)); !r) {
        return r.error().context(fmt::format("sandbox {}'s egress", sandbox.id)).with_code(api::code::kInternal);
    }
    return ok();
}

void VmmDriver::disconnect_network(const SandboxRecord& sandbox) {
    if (config_.network == nullptr || !sandbox.network) {
        return;
    }
    if (auto gone = config_.network->detach(sandbox.network->slot); !gone) {
        log::warn("sandbox {}: removing its tap: {}", sandbox.id, gone.error().to_string());
    }
}

void VmmDriver::adopt_networks() {
    if (config_.network == nullptr) {
        return;
    }
    auto sandboxes = store_.list_sandboxes({});
    if (!sandboxes) {
        log::warn("the sandboxes' networks: {}", sandboxes.error().to_string());
        return;
    }
    std::vector<net::Adoption> adoptions;
    for (const SandboxRecord& s : *sandboxes) {
        if (!s.network) {
            continue;
        }
        auto mac = parse_mac(s.network->mac);
        if (!mac) {
            log::warn("sandbox {}: MAC '{}' in the store: {}", s.id, s.network->mac, mac.error().to_string());
            continue;
        }
        adoptions.push_back(net::Adoption{s.network->slot, *mac, egress_of(s)});
    }
    auto report = config_.network->adopt(adoptions);
    for (const auto& [slot, why] : report.failed) {
        log::warn("the tap of slot {}: {}", slot, why.to_string());
    }
    if (!adoptions.empty()) {
        log::info("took back {} of {} sandbox taps", report.adopted.size(), adoptions.size());
    }
}

Result<std::optional<VmmDriver::TemplateNetwork>> VmmDriver::template_network() {
    if (config_.network == nullptr) {
        return std::optional<TemplateNetwork>();
    }
    auto suffix = random_hex(3);
    auto mac = random_local_mac();
    if (!suffix || !mac) {
        return make_error("no name or MAC for the template's tap");
    }
    // "sbxt" + 6 hex digits: the sandbox interface prefix, never a slot's name.
    auto tap = net::PersistentTap::create(std::string(net::kInterfacePrefix) + "t" + *suffix);
    if (!tap) {
        return tap.error().context("the template's tap");
    }
    NetAttachment attachment{tap->name(), format_mac(*mac)};
    return std::optional<TemplateNetwork>(TemplateNetwork{std::move(*tap), std::move(attachment)});
}

}  // namespace sbx::sbxd

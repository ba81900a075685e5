// The host side of sandbox networking (docs/network.md): one HostNetwork
// per sbxd owns the egress table, IPv4 forwarding, the DNS forwarder and a
// tap per attached sandbox. Safe to call from several threads (one mutex).
//
//   auto net = HostNetwork::open(config);      // at start
//   net->adopt(slots of sandboxes that run);   // right after, on a restart
//   auto sn = net->attach(slot, {mac});        // create, start, fork, restore
//   sbx-vmm --net tap=<sn.tap>,mac=<sn.mac>    // the guest: sn.guest_cidr via sn.gateway, DNS sn.dns
//   net->detach(slot);                         // stop, delete
//   net->release();                            // sbxd exits; VMMs keep running
//
// Destroying a HostNetwork that was not released tears everything down:
// taps, table, dnsmasq (net.ipv4.ip_forward stays 1) -- but the table
// stays while a sandbox interface it did not attach still has an address
// (a running VMM's tap not adopted yet: a start that failed), so that no
// sandbox interface outlives its policy.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/mac_address.hpp"
#include "base/result.hpp"
#include "host-tools/sbxd/net/address_pool.hpp"
#include "host-tools/sbxd/net/dns_forwarder.hpp"
#include "host-tools/sbxd/net/egress_spec.hpp"
#include "host-tools/sbxd/net/egress_table.hpp"
#include "host-tools/sbxd/net/tap.hpp"

namespace sbx::sbxd::net {

struct HostNetworkConfig {
    std::string pool = std::string(kDefaultPool);
    std::string uplink;                      // empty: the interface of the IPv4 default route
    std::vector<std::string> dns_upstreams;  // IPv4 addresses; empty: the host's /etc/resolv.conf
    std::string state_dir;                   // dnsmasq's pid file and log go here
    std::string dnsmasq = "/usr/sbin/dnsmasq";
    bool log_dns_queries = false;
    std::vector<std::string> dns_rebind_ok;  // tests only: DnsConfig::rebind_ok_domains
};

// What a sandbox is given.
struct SandboxNet {
    std::uint32_t slot = 0;
    std::string tap;   // "sbx3": `sbx-vmm --net tap=sbx3,mac=...`
    MacAddress mac{};  // the guest's
    SandboxAddress address;
    std::string guest_cidr;  // "10.231.0.14/30": the guest's address
    std::string gateway;     // "10.231.0.13": the guest's default route
    std::string dns;         // the forwarder, on the gateway address
    Egress egress;
};

struct AttachOptions {
    std::optional<MacAddress> mac;  // none: a random locally administered one
    Egress egress;
};

// A sandbox that runs while sbxd restarts, as sbxd's store has it.
struct Adoption {
    std::uint32_t slot = 0;
    MacAddress mac{};
    Egress egress;
    bool caller_interface = false;  // attach_existing's kind (tests): not a tap of ours
};

struct AdoptReport {
    std::vector<SandboxNet> adopted;
    std::vector<std::pair<std::uint32_t, Error>> failed;
};

class HostNetwork {
public:
    // Builds the egress table (replacing one an earlier sbxd left, with no
    // sandbox in it), turns on IPv4 forwarding and starts dnsmasq, in that
    // order. Codes: "bad_cidr", "no_uplink", "no_such_interface",
    // "nftables", "dns_forwarder".
    static Result<std::unique_ptr<HostNetwork>> open(HostNetworkConfig config);

    HostNetwork(const HostNetwork&) = delete;
    HostNetwork& operator=(const HostNetwork&) = delete;
    ~HostNetwork();

    // Gives the slot's sandbox its tap (created, or a stale one reused),
    // the gateway address on it, and its place in the egress table. Codes:
    // "bad_slot", "slot_in_use" (attached already), "tap_busy" (a process
    // holds a tap of that name), "not_a_tap".
    Result<SandboxNet> attach(std::uint32_t slot, const AttachOptions& options = {});
    // The same over an interface named interface_name(slot) that the
    // caller made and keeps (it is neither created nor deleted here): for
    // tests that stand a veth in for the tap. Code "no_such_interface".
    Result<SandboxNet> attach_existing(std::uint32_t slot, const AttachOptions& options = {});
    // Takes the slot out of the egress table, then deletes its tap (or, for
    // attach_existing, takes the gateway address off). A slot that is not
    // attached has whatever is left of it removed: a tap of its name, its
    // set elements.
    Result<void> detach(std::uint32_t slot);
    // A new egress policy for an attached slot, in one transaction (an
    // allow list is replaced whole). Code "not_attached".
    Result<void> set_egress(std::uint32_t slot, const Egress& egress);

    // After a restart: takes each running sandbox's tap back (creating it
    // when it is gone), then rebuilds the table with every attached
    // sandbox in one transaction. Until then the sandboxes' packets are
    // dropped, not let through: call it right after open.
    AdoptReport adopt(std::span<const Adoption> sandboxes);

    [[nodiscard]] std::optional<SandboxNet> find(std::uint32_t slot) const;
    [[nodiscard]] const AddressPool& pool() const { return pool_; }
    [[nodiscard]] const std::string& uplink() const { return policy_.uplink; }
    // Starts dnsmasq again if it has ended (for a periodic check).
    Result<void> check_dns_forwarder();
    // Leaves the taps, the table and dnsmasq to the next sbxd.
    void release();

private:
    struct Attached {
        SandboxNet net;
        std::optional<PersistentTap> tap;  // none: attach_existing's interface
    };
    HostNetwork(AddressPool pool, EgressPolicy policy, EgressTable table, DnsForwarder dns)
        : pool_(pool), policy_(std::move(policy)), table_(std::move(table)), dns_(std::move(dns)) {}
    Result<SandboxNet> attach_locked(std::uint32_t slot, const AttachOptions& options, bool existing);
    Result<Attached> bring_up(std::uint32_t slot, const MacAddress& mac, const Egress& egress,
                              std::optional<PersistentTap> tap);
    void teardown();

    mutable std::mutex mutex_;
    AddressPool pool_;
    EgressPolicy policy_;
    EgressTable table_;
    DnsForwarder dns_;
    std::map<std::uint32_t, Attached> attached_;
    bool released_ = false;
};

}  // namespace sbx::sbxd::net

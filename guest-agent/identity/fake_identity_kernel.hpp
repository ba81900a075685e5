// For host tests: an IdentityKernel that records what the identity op
// asks of the kernel and answers from its fields, touching neither the
// host's RNG nor its network nor its /etc/resolv.conf.
#pragma once

#include <net/if.h>

#include <algorithm>
#include <mutex>

#include "guest-agent/identity/identity_kernel.hpp"

namespace sbx::agent::testing {

struct FakeIdentityKernel final : IdentityKernel {
    std::mutex mutex;
    // RNG
    std::vector<std::vector<std::uint8_t>> entropy;  // each add_entropy's seed
    int reseeds = 0;
    int entropy_errno = 0;  // non-zero: add_entropy fails with it
    int reseed_errno = 0;
    // vsock
    std::optional<std::uint32_t> cid;
    // network
    std::optional<std::string> ifname;
    MacAddress mac{{0x52, 0x54, 0x00, 0x00, 0x00, 0x01}};
    std::uint32_t flags = IFF_UP | IFF_RUNNING;
    bool live_change = true;            // false: setting the address while up is EBUSY
    std::vector<Ipv4Prefix> addresses;  // of `ifname`
    std::vector<DefaultRoute> routes;   // the main table's default routes
    ResolvConf resolv;
    // host name: the kernel's, and /etc/hostname and /etc/hosts (nothing: missing)
    std::string kernel_hostname = "sandbox";
    std::optional<std::string> etc_hostname = std::string("sandbox\n");
    std::optional<std::string> etc_hosts = std::string(
        "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\t\tlocalhost ip6-localhost ip6-loopback\n");
    // A change (a `calls` entry starting with this) that fails with fail_errno.
    std::string fail_call;
    int fail_errno = EPERM;
    bool ignore_address_adds = false;  // add_ipv4_address succeeds but changes nothing
    // "set_hw_address", "set_flags up|down", "delete_address A/P", "add_address A/P",
    // "replace_route via G", "delete_route via G metric M", "write_resolv_conf",
    // "write_etc hosts|hostname", "set_hostname NAME".
    std::vector<std::string> calls;

    Result<void> add_entropy(std::span<const std::uint8_t> seed) override {
        std::lock_guard lock(mutex);
        if (entropy_errno != 0) {
            return errno_error("adding the seed to the kernel RNG (RNDADDENTROPY) on /dev/urandom",
                               entropy_errno);
        }
        entropy.emplace_back(seed.begin(), seed.end());
        return ok();
    }
    Result<void> reseed_crng() override {
        std::lock_guard lock(mutex);
        if (reseed_errno != 0) {
            return errno_error("reseeding the kernel CRNG (RNDRESEEDCRNG) on /dev/urandom", reseed_errno);
        }
        ++reseeds;
        return ok();
    }
    std::optional<std::uint32_t> local_cid() override {
        std::lock_guard lock(mutex);
        return cid;
    }
    std::optional<std::uint32_t> socket_cid(int) override { return std::nullopt; }
    std::optional<std::string> virtio_net_interface() override {
        std::lock_guard lock(mutex);
        return ifname;
    }
    Result<MacAddress> hw_address(const std::string&) override {
        std::lock_guard lock(mutex);
        return mac;
    }
    Result<void> set_hw_address(const std::string&, const MacAddress& to) override {
        std::lock_guard lock(mutex);
        calls.emplace_back("set_hw_address");
        if (!live_change && (flags & IFF_UP) != 0) {
            return errno_error("setting the address (SIOCSIFHWADDR)", EBUSY);
        }
        mac = to;
        return ok();
    }
    Result<std::uint32_t> interface_flags(const std::string&) override {
        std::lock_guard lock(mutex);
        return flags;
    }
    Result<void> set_interface_flags(const std::string&, std::uint32_t to) override {
        std::lock_guard lock(mutex);
        if (auto r = record((to & IFF_UP) != 0 ? "set_flags up" : "set_flags down"); !r) {
            return r;
        }
        if ((flags & IFF_UP) != 0 && (to & IFF_UP) == 0) {
            // NETDEV_DOWN: the kernel drops the IPv4 routes through the interface (fib_sync_down_dev).
            std::erase_if(routes, [&](const DefaultRoute& r) { return ifname && r.interface == *ifname; });
        }
        flags = to;
        return ok();
    }

    Result<std::vector<Ipv4Prefix>> ipv4_addresses(const std::string&) override {
        std::lock_guard lock(mutex);
        return addresses;
    }
    Result<void> add_ipv4_address(const std::string&, const Ipv4Prefix& address) override {
        std::lock_guard lock(mutex);
        if (auto r = record("add_address " + format_ipv4_prefix(address)); !r) {
            return r;
        }
        if (!ignore_address_adds &&
            std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
            addresses.push_back(address);
        }
        return ok();
    }
    Result<void> delete_ipv4_address(const std::string&, const Ipv4Prefix& address) override {
        std::lock_guard lock(mutex);
        if (auto r = record("delete_address " + format_ipv4_prefix(address)); !r) {
            return r;
        }
        std::erase(addresses, address);
        return ok();
    }
    Result<std::vector<DefaultRoute>> ipv4_default_routes() override {
        std::lock_guard lock(mutex);
        return routes;
    }
    Result<void> replace_ipv4_default_route(const std::string& dev, Ipv4Address gateway) override {
        std::lock_guard lock(mutex);
        if (auto r = record("replace_route via " + format_ipv4(gateway)); !r) {
            return r;
        }
        DefaultRoute ours{gateway, dev, 0, 0};
        // NLM_F_REPLACE: the first route of the same metric and TOS, else a new one.
        auto same = std::find_if(routes.begin(), routes.end(),
                                 [](const auto& r) { return r.metric == 0 && r.tos == 0; });
        if (same != routes.end()) {
            *same = ours;
        } else {
            routes.push_back(ours);
        }
        return ok();
    }
    Result<void> delete_ipv4_default_route(const DefaultRoute& route) override {
        std::lock_guard lock(mutex);
        if (auto r = record(fmt::format("delete_route via {} metric {}",
                                        route.gateway ? format_ipv4(*route.gateway) : "-", route.metric));
            !r) {
            return r;
        }
        std::erase(routes, route);
        return ok();
    }
    Result<ResolvConf> read_resolv_conf() override {
        std::lock_guard lock(mutex);
        return resolv;
    }
    Result<void> write_resolv_conf(std::string_view text) override {
        std::lock_guard lock(mutex);
        if (auto r = record("write_resolv_conf"); !r) {
            return r;
        }
        resolv = ResolvConf{true, false, {}, std::string(text)};
        return ok();
    }

    Result<std::string> hostname() override {
        std::lock_guard lock(mutex);
        return kernel_hostname;
    }
    Result<void> set_hostname(std::string_view name) override {
        std::lock_guard lock(mutex);
        if (auto r = record("set_hostname " + std::string(name)); !r) {
            return r;
        }
        kernel_hostname = std::string(name);
        return ok();
    }
    Result<std::optional<std::string>> read_etc(EtcFile file) override {
        std::lock_guard lock(mutex);
        return file == EtcFile::Hostname ? etc_hostname : etc_hosts;
    }
    Result<void> write_etc(EtcFile file, std::string_view text) override {
        std::lock_guard lock(mutex);
        if (auto r = record(file == EtcFile::Hostname ? "write_etc hostname" : "write_etc hosts"); !r) {
            return r;
        }
        (file == EtcFile::Hostname ? etc_hostname : etc_hosts) = std::string(text);
        return ok();
    }

private:
    // Caller holds the mutex.
    Result<void> record(std::string call) {
        const bool fails = !fail_call.empty() && call.starts_with(fail_call);
        calls.push_back(std::move(call));
        if (fails) {
            return errno_error(calls.back(), fail_errno);
        }
        return ok();
    }
};

}  // namespace sbx::agent::testing

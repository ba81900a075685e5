// For host tests: an IdentityKernel that records what the identity op
// asks of the kernel and answers from its fields, touching neither the
// host's RNG nor its network.
#pragma once

#include <net/if.h>

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
    bool live_change = true;         // false: setting the address while up is EBUSY
    std::vector<std::string> calls;  // "set_hw_address", "set_flags up|down"

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
        calls.emplace_back((to & IFF_UP) != 0 ? "set_flags up" : "set_flags down");
        flags = to;
        return ok();
    }
};

}  // namespace sbx::agent::testing

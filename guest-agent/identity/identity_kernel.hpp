// The kernel calls behind the identity op: seeding the RNG, reading the
// vsock CID, and the virtio-net interface's address. The agent binds
// SystemIdentityKernel (the real system calls; it runs as root in the
// guest); host tests bind a fake, so they never touch the host's RNG or
// network.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "guest-agent/identity/identity_fields.hpp"

namespace sbx::agent {

class IdentityKernel {
public:
    virtual ~IdentityKernel() = default;

    // Mixes `seed` into the input pool and credits 8 bits per byte
    // (RNDADDENTROPY, needs CAP_SYS_ADMIN), then makes the CRNG take a new
    // key from the pool now rather than at its next scheduled reseed
    // (RNDRESEEDCRNG, CAP_SYS_ADMIN; ENODEV while the CRNG is not ready).
    // linux/random.h; drivers/char/random.c random_ioctl.
    [[nodiscard]] virtual Result<void> add_entropy(std::span<const std::uint8_t> seed) = 0;
    [[nodiscard]] virtual Result<void> reseed_crng() = 0;

    // IOCTL_VM_SOCKETS_GET_LOCAL_CID on /dev/vsock (linux/vm_sockets.h);
    // nothing when there is no vsock transport (the ioctl gives
    // VMADDR_CID_ANY) or no device.
    [[nodiscard]] virtual std::optional<std::uint32_t> local_cid() = 0;
    // The local CID of a connected AF_VSOCK socket (getsockname), else nothing.
    [[nodiscard]] virtual std::optional<std::uint32_t> socket_cid(int fd) = 0;

    // The first interface (lowest ifindex) driven by virtio_net, if any.
    [[nodiscard]] virtual std::optional<std::string> virtio_net_interface() = 0;
    // SIOCGIFHWADDR / SIOCSIFHWADDR / SIOCGIFFLAGS / SIOCSIFFLAGS (netdevice(7)).
    [[nodiscard]] virtual Result<MacAddress> hw_address(const std::string& ifname) = 0;
    [[nodiscard]] virtual Result<void> set_hw_address(const std::string& ifname, const MacAddress& mac) = 0;
    [[nodiscard]] virtual Result<std::uint32_t> interface_flags(const std::string& ifname) = 0;
    [[nodiscard]] virtual Result<void> set_interface_flags(const std::string& ifname,
                                                           std::uint32_t flags) = 0;
};

// The real system calls. `sys_class_net` is where interfaces are listed
// (/sys/class/net; a test may point it at a fake tree).
[[nodiscard]] std::unique_ptr<IdentityKernel> make_system_identity_kernel(
    std::filesystem::path sys_class_net = "/sys/class/net");

// The entries of `sys_class_net` whose device/driver links to a directory
// named virtio_net, ordered by their ifindex file (then name).
[[nodiscard]] std::vector<std::string> virtio_net_interfaces(const std::filesystem::path& sys_class_net);

// struct rand_pool_info {int entropy_count; int buf_size; __u32 buf[];}
// for `seed` as u32 words: entropy_count = 8 × size (bits), buf_size = size
// (bytes), then the bytes, zero-padded to a whole word.
[[nodiscard]] std::vector<std::uint32_t> rand_pool_info_words(std::span<const std::uint8_t> seed);

// Sets the address live; if the driver refuses while the link is up
// (EBUSY: no IFF_LIVE_ADDR_CHANGE), takes the link down, sets it and
// restores the flags (up again) — also when setting fails.
// Returns whether the link had to go down.
[[nodiscard]] Result<bool> change_hw_address(IdentityKernel& kernel, const std::string& ifname,
                                             const MacAddress& mac);

}  // namespace sbx::agent

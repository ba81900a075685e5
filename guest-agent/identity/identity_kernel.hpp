// The kernel calls behind the identity op: seeding the RNG, reading the
// vsock CID, the virtio-net interface's MAC and IPv4 settings,
// /etc/resolv.conf, and the host name (the kernel's, /etc/hostname and
// /etc/hosts). The agent binds
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
#include <string_view>
#include <vector>

#include "guest-agent/identity/identity_fields.hpp"
#include "guest-agent/identity/ipv4_fields.hpp"

namespace sbx::agent {

// An IPv4 default route (0.0.0.0/0) of the main routing table.
struct DefaultRoute {
    std::optional<Ipv4Address> gateway;  // nothing: none, or several next hops
    std::string interface;               // "": none, or several next hops
    std::uint32_t metric = 0;
    std::uint8_t tos = 0;
    bool operator==(const DefaultRoute&) const = default;
};

// What the resolver file is: missing, a regular file, or a symbolic link
// (its target as written, and the text behind it if that can be read).
struct ResolvConf {
    bool exists = false;
    bool symlink = false;
    std::string target;  // symlink only
    std::string text;
};

// The files of the machine's own name, under the kernel's etc directory.
enum class EtcFile { Hostname, Hosts };

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

    // The interface's IPv4 addresses (RTM_GETADDR), each as its local
    // address and prefix length; adding one that is there already keeps it
    // (RTM_NEWADDR with NLM_F_REPLACE); deleting one that is not there is no
    // error (rtnetlink.hpp).
    [[nodiscard]] virtual Result<std::vector<Ipv4Prefix>> ipv4_addresses(const std::string& ifname) = 0;
    [[nodiscard]] virtual Result<void> add_ipv4_address(const std::string& ifname,
                                                        const Ipv4Prefix& address) = 0;
    [[nodiscard]] virtual Result<void> delete_ipv4_address(const std::string& ifname,
                                                           const Ipv4Prefix& address) = 0;
    // The main table's IPv4 default routes; replacing sets the one of
    // metric 0 (RTM_NEWROUTE with NLM_F_REPLACE); deleting one that is not
    // there is no error.
    [[nodiscard]] virtual Result<std::vector<DefaultRoute>> ipv4_default_routes() = 0;
    [[nodiscard]] virtual Result<void> replace_ipv4_default_route(const std::string& ifname,
                                                                  Ipv4Address gateway) = 0;
    [[nodiscard]] virtual Result<void> delete_ipv4_default_route(const DefaultRoute& route) = 0;

    // The resolver configuration file (/etc/resolv.conf in the guest). The
    // write is atomic: a temporary file in the same directory, fsync,
    // rename(2) over the name (which replaces a symbolic link itself, not
    // its target), fsync of the directory.
    [[nodiscard]] virtual Result<ResolvConf> read_resolv_conf() = 0;
    [[nodiscard]] virtual Result<void> write_resolv_conf(std::string_view text) = 0;

    // The kernel's host name (uname(2) nodename) and setting it
    // (sethostname(2): CAP_SYS_ADMIN over the UTS namespace, at most
    // 64 bytes).
    [[nodiscard]] virtual Result<std::string> hostname() = 0;
    [[nodiscard]] virtual Result<void> set_hostname(std::string_view name) = 0;
    // /etc/hostname or /etc/hosts: its text (nothing when it is missing),
    // and replacing it atomically as write_resolv_conf does.
    [[nodiscard]] virtual Result<std::optional<std::string>> read_etc(EtcFile file) = 0;
    [[nodiscard]] virtual Result<void> write_etc(EtcFile file, std::string_view text) = 0;
};

// The real system calls. `sys_class_net` is where interfaces are listed
// (/sys/class/net), `resolv_conf` the resolver file (/etc/resolv.conf) and
// `etc_dir` where hostname and hosts are (/etc); a test points them at a
// fake tree and scratch files.
[[nodiscard]] std::unique_ptr<IdentityKernel> make_system_identity_kernel(
    std::filesystem::path sys_class_net = "/sys/class/net",
    std::filesystem::path resolv_conf = "/etc/resolv.conf", std::filesystem::path etc_dir = "/etc");

// Replaces `path` with a file holding `text` (mode 0644) as
// IdentityKernel::write_resolv_conf describes.
[[nodiscard]] Result<void> replace_file_atomically(const std::filesystem::path& path, std::string_view text);

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

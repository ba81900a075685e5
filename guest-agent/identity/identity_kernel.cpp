#include "guest-agent/identity/identity_kernel.hpp"

#include <fcntl.h>
#include <linux/random.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>

#include "base/unique_fd.hpp"

namespace sbx::agent {
namespace {

static_assert(offsetof(rand_pool_info, buf) == 2 * sizeof(std::uint32_t));

Result<ifreq> interface_request(const std::string& ifname) {
    ifreq request{};
    if (ifname.empty() || ifname.size() >= sizeof request.ifr_name) {
        return make_error("bad interface name \"{}\"", ifname);
    }
    std::memcpy(request.ifr_name, ifname.data(), ifname.size());
    return request;
}

// Interface ioctls go through any socket to dev_ioctl (net/core/dev_ioctl.c).
Result<void> interface_ioctl(unsigned long request, ifreq& ifr, std::string_view what) {
    UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock) {
        return sys_error("socket for interface ioctls");
    }
    if (::ioctl(sock.get(), request, &ifr) < 0) {
        return sys_error("{} of {}", what, ifr.ifr_name);
    }
    return ok();
}

Result<void> random_ioctl(unsigned long request, void* argument, std::string_view what) {
    UniqueFd fd(::open("/dev/urandom", O_WRONLY | O_CLOEXEC));
    if (!fd) {
        return sys_error("opening /dev/urandom");
    }
    if (::ioctl(fd.get(), request, argument) < 0) {
        return sys_error("{} on /dev/urandom", what);
    }
    return ok();
}

class SystemIdentityKernel final : public IdentityKernel {
public:
    explicit SystemIdentityKernel(std::filesystem::path sys_class_net)
        : sys_class_net_(std::move(sys_class_net)) {}

    Result<void> add_entropy(std::span<const std::uint8_t> seed) override {
        std::vector<std::uint32_t> words = rand_pool_info_words(seed);
        auto r =
            random_ioctl(RNDADDENTROPY, words.data(), "adding the seed to the kernel RNG (RNDADDENTROPY)");
        ::explicit_bzero(words.data(), words.size() * sizeof words[0]);
        return r;
    }

    Result<void> reseed_crng() override {
        return random_ioctl(RNDRESEEDCRNG, nullptr, "reseeding the kernel CRNG (RNDRESEEDCRNG)");
    }

    std::optional<std::uint32_t> local_cid() override {
        UniqueFd fd(::open("/dev/vsock", O_RDONLY | O_CLOEXEC));
        if (!fd) {
            return std::nullopt;
        }
        std::uint32_t cid = VMADDR_CID_ANY;
        if (::ioctl(fd.get(), IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0 || cid == VMADDR_CID_ANY) {
            return std::nullopt;
        }
        return cid;
    }

    std::optional<std::uint32_t> socket_cid(int fd) override {
        sockaddr_vm addr{};
        socklen_t len = sizeof addr;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) < 0 || addr.svm_family != AF_VSOCK ||
            addr.svm_cid == VMADDR_CID_ANY) {
            return std::nullopt;
        }
        return addr.svm_cid;
    }

    std::optional<std::string> virtio_net_interface() override {
        auto names = virtio_net_interfaces(sys_class_net_);
        if (names.empty()) {
            return std::nullopt;
        }
        return names.front();
    }

    Result<MacAddress> hw_address(const std::string& ifname) override {
        auto ifr = interface_request(ifname);
        if (!ifr) {
            return ifr.error();
        }
        if (auto r = interface_ioctl(SIOCGIFHWADDR, *ifr, "reading the address (SIOCGIFHWADDR)"); !r) {
            return r.error();
        }
        if (ifr->ifr_hwaddr.sa_family != ARPHRD_ETHER) {
            return make_error("{} is not an Ethernet interface (type {})", ifname, ifr->ifr_hwaddr.sa_family);
        }
        MacAddress mac;
        std::memcpy(mac.data(), ifr->ifr_hwaddr.sa_data, mac.size());
        return mac;
    }

    Result<void> set_hw_address(const std::string& ifname, const MacAddress& mac) override {
        auto ifr = interface_request(ifname);
        if (!ifr) {
            return ifr.error();
        }
        // dev_set_mac_address wants sa_family == dev->type (EINVAL otherwise).
        ifr->ifr_hwaddr.sa_family = ARPHRD_ETHER;
        std::memcpy(ifr->ifr_hwaddr.sa_data, mac.data(), mac.size());
        return interface_ioctl(SIOCSIFHWADDR, *ifr, "setting the address (SIOCSIFHWADDR)");
    }

    Result<std::uint32_t> interface_flags(const std::string& ifname) override {
        auto ifr = interface_request(ifname);
        if (!ifr) {
            return ifr.error();
        }
        if (auto r = interface_ioctl(SIOCGIFFLAGS, *ifr, "reading the flags (SIOCGIFFLAGS)"); !r) {
            return r.error();
        }
        return static_cast<std::uint32_t>(static_cast<std::uint16_t>(ifr->ifr_flags));
    }

    Result<void> set_interface_flags(const std::string& ifname, std::uint32_t flags) override {
        auto ifr = interface_request(ifname);
        if (!ifr) {
            return ifr.error();
        }
        ifr->ifr_flags = static_cast<short>(flags);
        return interface_ioctl(SIOCSIFFLAGS, *ifr, "setting the flags (SIOCSIFFLAGS)");
    }

private:
    std::filesystem::path sys_class_net_;
};

}  // namespace

std::unique_ptr<IdentityKernel> make_system_identity_kernel(std::filesystem::path sys_class_net) {
    return std::make_unique<SystemIdentityKernel>(std::move(sys_class_net));
}

std::vector<std::string> virtio_net_interfaces(const std::filesystem::path& sys_class_net) {
    std::vector<std::pair<long, std::string>> found;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(sys_class_net, ec)) {
        std::error_code link_ec;
        auto driver = std::filesystem::read_symlink(entry.path() / "device" / "driver", link_ec);
        if (link_ec || driver.filename() != "virtio_net") {
            continue;
        }
        long ifindex = -1;
        std::ifstream(entry.path() / "ifindex") >> ifindex;
        found.emplace_back(ifindex, entry.path().filename().string());
    }
    std::sort(found.begin(), found.end());
    std::vector<std::string> names;
    for (auto& [index, name] : found) {
        names.push_back(std::move(name));
    }
    return names;
}

std::vector<std::uint32_t> rand_pool_info_words(std::span<const std::uint8_t> seed) {
    std::vector<std::uint32_t> words(2 + (seed.size() + 3) / 4, 0);
    rand_pool_info header{};
    header.entropy_count = static_cast<int>(seed.size() * 8);
    header.buf_size = static_cast<int>(seed.size());
    std::memcpy(words.data(), &header, sizeof header);
    if (!seed.empty()) {
        std::memcpy(words.data() + 2, seed.data(), seed.size());
    }
    return words;
}

Result<bool> change_hw_address(IdentityKernel& kernel, const std::string& ifname, const MacAddress& mac) {
    auto live = kernel.set_hw_address(ifname, mac);
    if (live) {
        return false;
    }
    if (live.error().errno_value != EBUSY) {
        return live.error();
    }
    auto flags = kernel.interface_flags(ifname);
    if (!flags) {
        return flags.error();
    }
    if (auto down = kernel.set_interface_flags(ifname, *flags & ~static_cast<std::uint32_t>(IFF_UP)); !down) {
        return down.error().context("taking the link down to change its address");
    }
    auto set = kernel.set_hw_address(ifname, mac);
    auto up = kernel.set_interface_flags(ifname, *flags);
    if (!set) {
        return set.error();
    }
    if (!up) {
        return up.error().context("bringing the link up again after changing its address");
    }
    return true;
}

}  // namespace sbx::agent

#include "host-tools/sbxd/net/tap.hpp"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "host-tools/sbxd/net/netlink.hpp"

namespace sbx::sbxd::net {
namespace {

constexpr const char* kTunDevice = "/dev/net/tun";
// What sbx-vmm's open_tap asks for (devices/virtio/net/tap.cpp).
constexpr short kTapFlags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;

Result<void> check_name(std::string_view name) {
    if (name.empty() || name.size() >= IFNAMSIZ || name.find_first_of("/: \t\n%") != std::string_view::npos) {
        return make_coded_error("bad_interface_name",
                                "\"{}\" is not an interface name (1 to {} characters, no "
                                "'/', ':', '%' or spaces)",
                                name, IFNAMSIZ - 1);
    }
    return ok();
}

Error attach_error(std::string_view name, int err) {
    switch (err) {
        case EBUSY:
            return Error{fmt::format("tap {} is attached to a running process (a VMM?)", name), err,
                         "tap_busy"};
        case EINVAL:
            return Error{fmt::format("interface {} exists and is not a single-queue tap", name), err,
                         "not_a_tap"};
        case EPERM:
            return Error{fmt::format("tap {}: creating a tap needs CAP_NET_ADMIN", name), err, "permission"};
        default:
            return errno_error(fmt::format("tap {}: TUNSETIFF", name), err);
    }
}

}  // namespace

Result<bool> is_tap(std::string_view name) {
    auto socket = RouteSocket::open();
    if (!socket) {
        return socket.error();
    }
    auto info = socket->link(name);
    if (!info) {
        return info.error();
    }
    return info->kind == "tun" && info->arp_type == ARPHRD_ETHER;
}

Result<PersistentTap> PersistentTap::create(std::string_view name) {
    if (auto r = check_name(name); !r) {
        return r.error();
    }
    UniqueFd fd(::open(kTunDevice, O_RDWR | O_CLOEXEC));
    if (!fd) {
        return sys_error("tap {}: cannot open {} (is the tun module loaded?)", name, kTunDevice);
    }
    ifreq request{};
    std::copy(name.begin(), name.end(), std::begin(request.ifr_name));  // checked: shorter than IFNAMSIZ
    request.ifr_flags = kTapFlags;
    // Attaches to a tap of that name if there is one (a single-queue tap
    // takes one attached fd: EBUSY while a VMM holds it), else creates it.
    if (::ioctl(fd.get(), TUNSETIFF, &request) != 0) {
        return attach_error(name, errno);
    }
    if (std::string_view(request.ifr_name) != name) {
        return make_error("tap {}: the kernel named it {}", name, request.ifr_name);
    }
    PersistentTap tap{std::string(name)};
    if (::ioctl(fd.get(), TUNSETPERSIST, 1) != 0) {
        return sys_error("tap {}: TUNSETPERSIST", name);
    }
    return tap;  // fd closes: the tap stays, without carrier until a VMM attaches
}

Result<PersistentTap> PersistentTap::adopt(std::string_view name) {
    if (auto r = check_name(name); !r) {
        return r.error();
    }
    auto tap = is_tap(name);
    if (!tap) {
        return tap.error();
    }
    if (!*tap) {
        return make_coded_error("not_a_tap", "interface {} exists and is not a tap", name);
    }
    return PersistentTap{std::string(name)};
}

PersistentTap::PersistentTap(PersistentTap&& other) noexcept : name_(std::exchange(other.name_, {})) {}

PersistentTap& PersistentTap::operator=(PersistentTap&& other) noexcept {
    if (this != &other) {
        if (auto r = remove(); !r) {
            log::warn("{}", r.error().to_string());
        }
        name_ = std::exchange(other.name_, {});
    }
    return *this;
}

PersistentTap::~PersistentTap() {
    if (auto r = remove(); !r) {
        log::warn("{}", r.error().to_string());
    }
}

Result<void> PersistentTap::remove() {
    if (name_.empty()) {
        return ok();
    }
    // RTM_DELLINK rather than clearing TUNSETPERSIST: that needs the tap
    // attached to our fd, which a running VMM's attachment prevents.
    auto socket = RouteSocket::open();
    if (!socket) {
        return socket.error().context(fmt::format("deleting tap {}", name_));
    }
    if (auto r = socket->delete_link(name_); !r) {
        return r;
    }
    name_.clear();
    return ok();
}

std::string PersistentTap::release() {
    return std::exchange(name_, {});
}

}  // namespace sbx::sbxd::net

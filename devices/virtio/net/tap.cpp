#include "devices/virtio/net/tap.hpp"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cstring>
#include <iterator>

namespace sbx::virtio {
namespace {

constexpr const char* kTunDevice = "/dev/net/tun";

Result<void> set_vnet_header_size(int fd, std::string_view name) {
    int size = kNetHeaderSize;
    if (::ioctl(fd, TUNSETVNETHDRSZ, &size) != 0) {
        return sys_error("tap {}: cannot set the vnet header size to {} (TUNSETVNETHDRSZ)", name, size);
    }
    return ok();
}

// The advice goes last, where a reader looks for what to do, so the
// system's reason is folded into the message rather than appended.
Error attach_error(std::string_view name, int err) {
    const char* reason = std::strerror(err);
    switch (err) {
        case EPERM:
            return make_error(
                "tap {}: not permitted to create or attach it ({}; TUNSETIFF needs CAP_NET_ADMIN or a tap "
                "owned by this user); create it with `ip tuntap add {} mode tap user $USER`",
                name, reason, name);
        case EBUSY:
            return make_error(
                "tap {}: already attached by another process ({}; a single-queue tap has one user); stop "
                "that process or use another tap",
                name, reason);
        case EINVAL:
            return make_error(
                "tap {}: an interface of that name exists but is not a single-queue tap ({}); pick another "
                "name, or recreate it with `ip tuntap add {} mode tap`",
                name, reason, name);
        default:
            return errno_error(fmt::format("tap {}: cannot attach (TUNSETIFF)", name), err);
    }
}

}  // namespace

Result<void> check_interface_name(std::string_view name) {
    if (name.empty()) {
        return make_error("tap name is empty");
    }
    if (name.size() > IFNAMSIZ - 1) {
        return make_error("tap name \"{}\" is {} characters long; Linux interface names have at most {}",
                          name, name.size(), IFNAMSIZ - 1);
    }
    if (name == "." || name == "..") {
        return make_error("tap name \"{}\" is not a valid interface name", name);
    }
    for (char c : name) {
        if (c == '/' || c == ':' || c == '%' || c == ' ' || (c >= '\t' && c <= '\r') || c == '\0') {
            return make_error("tap name \"{}\" contains '{}', which an interface name cannot", name,
                              c == '\0' ? std::string("\\0") : std::string(1, c));
        }
    }
    return ok();
}

Result<UniqueFd> open_tap(std::string_view name) {
    if (auto r = check_interface_name(name); !r) {
        return r.error();
    }
    UniqueFd fd(::open(kTunDevice, O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT) {
            return make_error("tap {}: {} does not exist; load the tun module (`modprobe tun`)", name,
                              kTunDevice);
        }
        return sys_error("tap {}: cannot open {}", name, kTunDevice);
    }
    ifreq request{};
    std::copy(name.begin(), name.end(),
              std::begin(request.ifr_name));  // checked above: shorter than IFNAMSIZ
    request.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (::ioctl(fd.get(), TUNSETIFF, &request) != 0) {
        return attach_error(name, errno);
    }
    if (auto r = set_vnet_header_size(fd.get(), name); !r) {
        return r.error();
    }
    if (auto r = set_tap_offloads(fd.get(), 0); !r) {
        return r.error().context(fmt::format("tap {}", name));
    }
    return fd;
}

bool is_tap(int fd) {
    ifreq request{};
    return ::ioctl(fd, TUNGETIFF, &request) == 0 && (request.ifr_flags & IFF_TAP) != 0;
}

Result<void> configure_tap(int fd, std::string_view name) {
    ifreq request{};
    if (::ioctl(fd, TUNGETIFF, &request) != 0) {
        return sys_error("tap {}: not a tap file descriptor (TUNGETIFF)", name);
    }
    const int need = IFF_TAP | IFF_VNET_HDR;
    if ((request.ifr_flags & need) != need || (request.ifr_flags & IFF_NO_PI) == 0) {
        return make_error("tap {}: opened with flags {:#x}; IFF_TAP | IFF_NO_PI | IFF_VNET_HDR are needed",
                          name, static_cast<unsigned>(request.ifr_flags));
    }
    if (auto r = set_vnet_header_size(fd, name); !r) {
        return r;
    }
    if (auto r = set_tap_offloads(fd, 0); !r) {
        return r.error().context(fmt::format("tap {}", name));
    }
    return ok();
}

Result<void> set_tap_offloads(int fd, unsigned offloads) {
    if (::ioctl(fd, TUNSETOFFLOAD, offloads) != 0) {
        return sys_error("cannot set tap offloads to {:#x} (TUNSETOFFLOAD)", offloads);
    }
    return ok();
}

}  // namespace sbx::virtio

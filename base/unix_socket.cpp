#include "base/unix_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>

namespace sbx {
namespace {

Result<sockaddr_un> unix_address(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
        return make_error("socket path '{}' must be 1 to {} bytes", path, sizeof(addr.sun_path) - 1);
    }
    std::copy(path.begin(), path.end(), std::begin(addr.sun_path));
    return addr;
}

Result<UniqueFd> stream_socket(Blocking blocking) {
    const int flags = SOCK_STREAM | SOCK_CLOEXEC | (blocking == Blocking::No ? SOCK_NONBLOCK : 0);
    UniqueFd fd(::socket(AF_UNIX, flags, 0));
    if (!fd) {
        return sys_error("creating a Unix socket");
    }
    return fd;
}

// A socket file left behind by a process that is gone refuses
// connections; a live listener accepts them (or has a full backlog).
Result<void> remove_stale_socket(const std::string& path, const sockaddr_un& addr) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) {
            return ok();
        }
        return sys_error("socket path {}", path);
    }
    if (!S_ISSOCK(st.st_mode)) {
        return make_error("socket path {} exists and is not a socket", path);
    }
    auto probe = stream_socket(Blocking::No);
    if (!probe) {
        return probe.error();
    }
    if (::connect(probe->get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 || errno == EAGAIN) {
        return make_error("socket path {} is in use by a listening process", path);
    }
    if (errno != ECONNREFUSED) {
        return sys_error("socket path {}", path);
    }
    if (::unlink(path.c_str()) != 0) {
        return sys_error("removing stale socket {}", path);
    }
    return ok();
}

}  // namespace

Result<UniqueFd> connect_unix(const std::string& path, Blocking blocking) {
    auto addr = unix_address(path);
    if (!addr) {
        return addr.error();
    }
    auto fd = stream_socket(blocking);
    if (!fd) {
        return fd.error();
    }
    if (::connect(fd->get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
        return sys_error("connecting to {}", path);
    }
    return fd;
}

Result<UniqueFd> listen_unix(const std::string& path, Blocking blocking, int backlog) {
    auto addr = unix_address(path);
    if (!addr) {
        return addr.error();
    }
    if (auto r = remove_stale_socket(path, *addr); !r) {
        return r.error();
    }
    auto fd = stream_socket(blocking);
    if (!fd) {
        return fd.error();
    }
    if (::bind(fd->get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
        return sys_error("binding socket {}", path);
    }
    if (::listen(fd->get(), backlog) != 0) {
        Error e = sys_error("listening on socket {}", path);
        ::unlink(path.c_str());
        return e;
    }
    return fd;
}

}  // namespace sbx

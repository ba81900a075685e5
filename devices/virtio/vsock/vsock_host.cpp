#include "devices/virtio/vsock/vsock_host.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <iterator>

namespace sbx::virtio::vsock {
namespace {

constexpr int kListenBacklog = 128;

Result<sockaddr_un> unix_address(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
        return make_error("vsock socket path '{}' must be 1 to {} bytes", path, sizeof(addr.sun_path) - 1);
    }
    std::copy(path.begin(), path.end(), std::begin(addr.sun_path));
    return addr;
}

Result<UniqueFd> stream_socket() {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
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
        return sys_error("vsock socket path {}", path);
    }
    if (!S_ISSOCK(st.st_mode)) {
        return make_error("vsock socket path {} exists and is not a socket", path);
    }
    auto probe = stream_socket();
    if (!probe) {
        return probe.error();
    }
    if (::connect(probe->get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 || errno == EAGAIN) {
        return make_error("vsock socket path {} is in use by a listening process", path);
    }
    if (errno != ECONNREFUSED) {
        return sys_error("vsock socket path {}", path);
    }
    if (::unlink(path.c_str()) != 0) {
        return sys_error("removing stale vsock socket {}", path);
    }
    return ok();
}

bool parse_port(std::string_view digits, std::uint32_t& port) {
    if (digits.empty() || digits.size() > 10) {
        return false;
    }
    std::uint64_t value = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') {
            return false;
        }
        value = value * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (value > 0xffffffffULL) {
        return false;
    }
    port = static_cast<std::uint32_t>(value);
    return true;
}

}  // namespace

Result<UniqueFd> listen_unix(const std::string& path) {
    auto addr = unix_address(path);
    if (!addr) {
        return addr.error();
    }
    if (auto r = remove_stale_socket(path, *addr); !r) {
        return r.error();
    }
    auto fd = stream_socket();
    if (!fd) {
        return fd.error();
    }
    if (::bind(fd->get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
        return sys_error("binding vsock socket {}", path);
    }
    if (::listen(fd->get(), kListenBacklog) != 0) {
        Error e = sys_error("listening on vsock socket {}", path);
        ::unlink(path.c_str());
        return e;
    }
    return fd;
}

Result<UniqueFd> connect_unix(const std::string& path) {
    auto addr = unix_address(path);
    if (!addr) {
        return addr.error();
    }
    auto fd = stream_socket();
    if (!fd) {
        return fd.error();
    }
    if (::connect(fd->get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
        return sys_error("connecting to {}", path);
    }
    return fd;
}

std::optional<std::uint32_t> parse_connect_line(std::string_view line) {
    constexpr std::string_view kPrefix = "CONNECT ";
    std::uint32_t port = 0;
    if (!line.starts_with(kPrefix) || !parse_port(line.substr(kPrefix.size()), port)) {
        return std::nullopt;
    }
    return port;
}

ConnectLine read_connect_line(int fd) {
    using Status = ConnectLine::Status;
    std::array<char, kMaxConnectLine> buf{};
    const ssize_t peeked = ::recv(fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
    if (peeked < 0) {
        return {errno == EAGAIN || errno == EINTR ? Status::Incomplete : Status::Refused};
    }
    if (peeked == 0) {
        return {Status::Refused};  // EOF before a whole line
    }
    const auto end = buf.begin() + peeked;
    const auto newline = std::find(buf.begin(), end, '\n');
    if (newline == end) {
        return {static_cast<std::size_t>(peeked) == buf.size() ? Status::Refused : Status::Incomplete};
    }
    const auto line_len = static_cast<std::size_t>(newline - buf.begin());
    // Consume exactly the line; what follows stays queued for the guest.
    if (::recv(fd, buf.data(), line_len + 1, MSG_DONTWAIT) != static_cast<ssize_t>(line_len + 1)) {
        return {Status::Refused};
    }
    auto port = parse_connect_line(std::string_view(buf.data(), line_len));
    if (!port) {
        return {Status::Refused};
    }
    return {Status::Complete, *port};
}

std::string ok_line(std::uint32_t local_port) { return "OK " + std::to_string(local_port) + "\n"; }

}  // namespace sbx::virtio::vsock

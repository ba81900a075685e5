#include "guest-agent/forward/tcp_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace sbx::agent {

Result<TcpAddress> parse_tcp_address(std::string_view host, std::uint16_t port) {
    TcpAddress address;
    const std::string name = host == "localhost" ? std::string("127.0.0.1") : std::string(host);
    if (name.find('\0') != std::string::npos) {
        return make_error("host must be a numeric IPv4 or IPv6 address or \"localhost\"");
    }
    auto* v4 = reinterpret_cast<sockaddr_in*>(&address.storage);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&address.storage);
    if (::inet_pton(AF_INET, name.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        address.length = sizeof(sockaddr_in);
        address.text = fmt::format("{}:{}", name, port);
        return address;
    }
    address.storage = {};
    if (::inet_pton(AF_INET6, name.c_str(), &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        address.length = sizeof(sockaddr_in6);
        address.text = fmt::format("[{}]:{}", name, port);
        return address;
    }
    return make_error("host \"{}\" is not a numeric IPv4 or IPv6 address or \"localhost\"",
                      name.substr(0, 64));
}

Result<UniqueFd> connect_tcp(const TcpAddress& address, std::chrono::milliseconds timeout) {
    UniqueFd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
        return sys_error("socket for {}", address.text);
    }
    if (::connect(fd.get(), address.get(), address.length) < 0) {
        if (errno != EINPROGRESS) {
            return sys_error("connecting to {}", address.text);
        }
        pollfd p{fd.get(), POLLOUT, 0};
        int n = 0;
        do {
            n = ::poll(&p, 1, static_cast<int>(timeout.count()));
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
            return sys_error("connecting to {}", address.text);
        }
        if (n == 0) {
            return errno_error(fmt::format("connecting to {}", address.text), ETIMEDOUT);
        }
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) {
            return sys_error("connecting to {}", address.text);
        }
        if (err != 0) {
            return errno_error(fmt::format("connecting to {}", address.text), err);
        }
    }
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) < 0) {
        return sys_error("fcntl on the socket for {}", address.text);
    }
    return fd;
}

Result<UniqueFd> listen_tcp(const TcpAddress& address, int backlog) {
    UniqueFd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) {
        return sys_error("socket for {}", address.text);
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), address.get(), address.length) < 0) {
        return sys_error("binding {}", address.text);
    }
    if (::listen(fd.get(), backlog) < 0) {
        return sys_error("listening on {}", address.text);
    }
    return fd;
}

Result<std::uint16_t> local_port(int socket) {
    sockaddr_storage storage{};
    socklen_t length = sizeof storage;
    if (::getsockname(socket, reinterpret_cast<sockaddr*>(&storage), &length) < 0) {
        return sys_error("getsockname");
    }
    if (storage.ss_family == AF_INET) {
        return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
    }
    if (storage.ss_family == AF_INET6) {
        return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
    }
    return make_error("socket is not TCP");
}

}  // namespace sbx::agent

#include "guest-agent/agent/listener.hpp"

#include <linux/vm_sockets.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace sbx::agent {
namespace {
constexpr int kBacklog = 128;
}  // namespace

Result<UniqueFd> listen_vsock(std::uint32_t port) {
    UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) {
        return sys_error("vsock socket");
    }
    sockaddr_vm addr{};
    addr.svm_family = AF_VSOCK;
    addr.svm_cid = VMADDR_CID_ANY;
    addr.svm_port = port;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
        return sys_error("binding vsock port {}", port);
    }
    if (::listen(fd.get(), kBacklog) < 0) {
        return sys_error("listening on vsock port {}", port);
    }
    return fd;
}

Result<UniqueFd> connect_vsock_host(std::uint32_t port) {
    UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) {
        return sys_error("vsock socket");
    }
    sockaddr_vm addr{};
    addr.svm_family = AF_VSOCK;
    addr.svm_cid = VMADDR_CID_HOST;
    addr.svm_port = port;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
        return sys_error("connecting to host vsock port {}", port);
    }
    return fd;
}

Result<UniqueFd> connect_unix_host(const std::string& prefix, std::uint32_t port) {
    return connect_unix(prefix + "_" + std::to_string(port));
}

Result<UniqueFd> accept_connection(int listener) {
    while (true) {
        int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
            return UniqueFd(fd);
        }
        if (errno != EINTR && errno != ECONNABORTED) {
            return sys_error("accept");
        }
    }
}

}  // namespace sbx::agent

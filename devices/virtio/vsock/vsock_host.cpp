#include "devices/virtio/vsock/vsock_host.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

namespace sbx::virtio::vsock {
namespace {

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

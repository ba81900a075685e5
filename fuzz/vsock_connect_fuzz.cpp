// libFuzzer target: arbitrary bytes from a host client on the hybrid-vsock
// Unix socket (Firecracker's "CONNECT <port>\n", devices/virtio/vsock/
// vsock_host.hpp), read with read_connect_line over a real socketpair. It
// completes exactly for a line "CONNECT " + 1..10 decimal digits (at most
// 2^32-1) + "\n" within kMaxConnectLine bytes, consumes exactly that line
// (what follows stays queued for the guest) and refuses a longer one;
// parse_connect_line agrees with it.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <optional>
#include <string_view>

#include "base/unique_fd.hpp"
#include "devices/virtio/vsock/vsock_host.hpp"

namespace {

using namespace sbx::virtio::vsock;

void check(bool ok) {
    if (!ok) {
        __builtin_trap();
    }
}

// The reference: what the line must be for a port.
std::optional<std::uint32_t> reference_port(std::string_view line) {
    constexpr std::string_view kPrefix = "CONNECT ";
    if (!line.starts_with(kPrefix)) {
        return std::nullopt;
    }
    auto digits = line.substr(kPrefix.size());
    if (digits.empty() || digits.size() > 10) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        value = value * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (value > 0xffffffffULL) {
        return std::nullopt;
    }
    return static_cast<std::uint32_t>(value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const auto line_end = input.find('\n');
    const std::string_view line = input.substr(0, line_end);
    check(parse_connect_line(line) == reference_port(line));

    if (size > 4096) {
        return 0;  // more than a socketpair holds without a reader
    }
    int fds[2];
    check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    sbx::UniqueFd client(fds[0]), vmm(fds[1]);
    check(::write(client.get(), data, size) == static_cast<ssize_t>(size));
    ::shutdown(client.get(), SHUT_WR);

    const auto got = read_connect_line(vmm.get());
    const bool whole_line = line_end != std::string_view::npos && line_end + 1 <= kMaxConnectLine;
    if (size == 0) {
        check(got.status == ConnectLine::Status::Refused);  // EOF at once
        return 0;
    }
    if (!whole_line) {
        // No newline within the bound: refused once the bound is full,
        // else still waiting for the rest of the line.
        const bool full = size >= kMaxConnectLine;
        check(got.status == (full ? ConnectLine::Status::Refused : ConnectLine::Status::Incomplete));
        return 0;
    }
    const auto port = reference_port(line);
    if (!port) {
        check(got.status == ConnectLine::Status::Refused);
        return 0;
    }
    check(got.status == ConnectLine::Status::Complete && got.port == *port);
    // Exactly the line was consumed: the rest is what follows it.
    std::string rest(size, '\0');
    ssize_t n = ::recv(vmm.get(), rest.data(), rest.size(), MSG_DONTWAIT);
    rest.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    check(rest == input.substr(line_end + 1));
    return 0;
}

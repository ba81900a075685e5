// The host side of Firecracker's "hybrid vsock" convention: the VMM
// listens on a Unix socket; a host process connects and writes
// "CONNECT <port>\n" to reach guest port <port>, and reads "OK <local
// port>\n" once the guest accepted. A guest connecting to host port P is
// connected to the Unix listener at "<uds_path>_P".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.hpp"
#include "base/unique_fd.hpp"

namespace sbx::virtio::vsock {

// A CONNECT line longer than this (newline included) is refused.
inline constexpr std::size_t kMaxConnectLine = 64;

// "CONNECT <port>" without its newline, port decimal and at most 2^32-1.
[[nodiscard]] std::optional<std::uint32_t> parse_connect_line(std::string_view line);

// Reads a host client's CONNECT line without consuming anything after it
// (the bytes that follow are stream data for the guest).
struct ConnectLine {
    enum class Status { Incomplete, Complete, Refused };
    Status status = Status::Incomplete;
    std::uint32_t port = 0;
};
[[nodiscard]] ConnectLine read_connect_line(int fd);

// What the host reads once the guest accepted: "OK <local_port>\n".
[[nodiscard]] std::string ok_line(std::uint32_t local_port);

}  // namespace sbx::virtio::vsock

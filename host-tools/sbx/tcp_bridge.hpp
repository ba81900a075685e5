// The sbx side of TCP over a WebSocket (docs/api.md, "TCP over a
// WebSocket"): the routes' targets, and one local byte stream (a TCP
// connection, or stdin and stdout) carried over one such WebSocket until
// both directions have ended. A local end of stream is sent as
// {"type":"eof"}; sbxd's eof becomes shutdown(SHUT_WR) of the local
// socket (or closes stdout), so half-closes pass both ways (RFC 9293 §3.6).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "host-tools/sbx/ws_client.hpp"

namespace sbx::cli {

// Local bytes go out in binary messages of at most this much.
inline constexpr std::size_t kBridgeChunkBytes = 64 * 1024;

[[nodiscard]] std::string tcp_ws_target(std::string_view id, std::uint16_t port);
[[nodiscard]] std::string tcp_listen_target(std::string_view id, std::uint16_t port);
[[nodiscard]] std::string tcp_accept_target(std::string_view id, std::string_view connection);

// "8080:80" (forward: LOCAL:REMOTE; reverse: REMOTE:LOCAL) or "8080"
// (the same port both sides). `allow_zero_first`: the first may be 0 (the
// kernel or the guest picks one). Error code "usage".
struct PortPair {
    std::uint16_t first = 0, second = 0;
};
[[nodiscard]] Result<PortPair> parse_port_pair(std::string_view spec, bool allow_zero_first);

// How the relay ended: sbxd's close code (0 when the connection broke)
// and reason, and the message of an error sbxd sent before it.
struct BridgeEnd {
    std::uint16_t code = 0;
    std::string reason;
    std::string error;  // "code: message" of {"type":"error",...}, if one came
    [[nodiscard]] bool clean() const { return code == 1000 && error.empty(); }
    [[nodiscard]] std::string describe() const;
};

// The local side: read from `in_fd`, write to `out_fd` (one socket for
// both, or stdin and stdout). Blocks until the WebSocket closes; `abort_fd`
// (an eventfd, or -1) readable ends it at once.
struct LocalStream {
    int in_fd = -1;
    int out_fd = -1;
    bool socket = false;
};
[[nodiscard]] BridgeEnd carry(WsExecClient& ws, LocalStream local, int abort_fd = -1);

}  // namespace sbx::cli

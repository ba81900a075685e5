// A TCP stream carried over a WebSocket (docs/api.md, "TCP over a
// WebSocket"): binary messages are the bytes, a text {"type":"eof"} a
// half-close (RFC 9293 §3.6: the sender will send no more, the other
// direction goes on), and the close code says how it ended. The stream is
// the raw socket the agent hands over after connect_tcp, or a guest
// connection that arrived through a listen_tcp (tcp_routes.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.hpp"
#include "host-tools/sbxd/http/ws_channel.hpp"

namespace sbx::sbxd {

// Bytes from the guest go out in binary messages of at most this much.
inline constexpr std::size_t kTcpChunkBytes = 64 * 1024;

// The text messages both ways.
[[nodiscard]] http::WsMessage tcp_eof_message();
// What a text message from the client is: only {"type":"eof"} is one
// (else kWsUnsupportedData or kWsInvalidPayload, ws_exec.hpp).
[[nodiscard]] Result<void> read_tcp_control(std::string_view text);

// How the bytes travel. The API's tcp/ws: half-closes as {"type":"eof"}
// text messages both ways, errors as an error message before the close.
// Plain (`eof_messages` false: the desktop's noVNC, which knows nothing of
// them): binary messages only; a text message from the client closes with
// 1003, the guest's end of stream with 1000, an error with its close code
// alone. `client_filter`, when set, takes the client's bytes before the
// guest does (the view-only RFB filter, rfb_filter.hpp); its error closes
// with 1008 (RFC 6455 §7.4.1), its message the reason.
struct TcpFraming {
    bool eof_messages = true;
    std::function<Result<void>(std::string_view in, std::string& out)> client_filter{};
};

// Relays until both directions have ended (then close 1000), the client
// goes away (the stream is shut both ways), or the stream fails (an error
// message and 4502). `received`: guest bytes that came with the agent's
// reply, sent first. Runs on the WebSocket's handler thread and one more.
void relay_tcp(http::WsChannel& channel, UniqueFd stream, std::vector<std::uint8_t> received,
               const std::string& request_id, const TcpFraming& framing = {});

}  // namespace sbx::sbxd

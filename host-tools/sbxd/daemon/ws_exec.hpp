// The messages of GET /v1/sandboxes/{id}/exec/ws (docs/api.md, "Exec over
// a WebSocket"), apart from any socket: the client's first message (the
// exec request), its control messages, sbxd's output frames, and which
// close code (RFC 6455 §7.4) ends a connection for an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/daemon/exec_request.hpp"
#include "host-tools/sbxd/http/ws_channel.hpp"

namespace sbx::sbxd {

// The exec request must come this soon after the handshake (else 4408).
inline constexpr std::chrono::seconds kWsFirstMessageTimeout{30};

// Output frames: one byte naming the stream, then its bytes.
inline constexpr std::uint8_t kWsStdout = 1;
inline constexpr std::uint8_t kWsStderr = 2;

// Errors of the codec whose code is not the API's: the message's frame
// type is wrong (close 1003), it is not JSON or not an object (1007).
inline constexpr std::string_view kWsUnsupportedData = "unsupported_data";
inline constexpr std::string_view kWsInvalidPayload = "invalid_payload";

// The first message: a text frame holding the exec's JSON request (the
// fields of POST .../exec but stdin and detach, plus tty {rows, cols}).
[[nodiscard]] Result<ExecBody> read_ws_start(const http::WsMessage& message);

struct WsControl {
    enum Kind { Resize, Signal, Eof } kind = Eof;
    int rows = 0, cols = 0;  // Resize
    int signal = 0;          // Signal
};
// A later text frame: {"type":"resize","rows","cols"}, {"type":"signal",
// "signal"} or {"type":"eof"}. Another type is kWsUnsupportedData.
[[nodiscard]] Result<WsControl> read_ws_control(std::string_view text);

// A binary frame of output: the stream's byte, then `bytes`.
[[nodiscard]] http::WsMessage ws_output(std::uint8_t stream, std::span<const std::uint8_t> bytes);

// The close frame for an error (RFC 6455 §7.4.1, §7.4.2), its reason the
// error's code: kWsUnsupportedData 1003, kWsInvalidPayload 1007, a
// retryable API error (429, 503) 1013, 500 1011, any other API error
// 4000 + its status (4400, 4404, 4409, 4502, ...).
[[nodiscard]] http::WsClose ws_close_for(const Error& error);
// The text frame sent before that close: {"type":"error", and the API's
// error fields: "ok":false, "status", "code", "message", "requestId"}.
[[nodiscard]] http::WsMessage ws_error(const Error& error, std::string_view request_id);
// Sends ws_error and closes with ws_close_for: how a WebSocket route ends on an error.
void ws_fail(http::WsChannel& channel, const Error& error, std::string_view request_id);

}  // namespace sbx::sbxd

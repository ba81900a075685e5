// Constants and JSON message helpers of the agent protocol
// (docs/agent-protocol.md): ports, version, message types, error codes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::agent {

using Json = nlohmann::json;

inline constexpr int kProtocolVersion = 1;
inline constexpr std::uint32_t kAgentPort = 52;  // the agent listens here (vsock)
inline constexpr std::uint32_t kReadyPort = 53;  // the agent announces itself to the host here
inline constexpr std::string_view kAgentVersion = "sbx-agent 0.1.0";

// Error codes carried in {"type":"error","code":...}.
namespace code {
inline constexpr std::string_view kBadFrame = "bad_frame";
inline constexpr std::string_view kBadRequest = "bad_request";
inline constexpr std::string_view kUnknownOp = "unknown_op";
inline constexpr std::string_view kUnauthorized = "unauthorized";
inline constexpr std::string_view kUnsupportedVersion = "unsupported_version";
inline constexpr std::string_view kNotFound = "not_found";
inline constexpr std::string_view kExists = "exists";
inline constexpr std::string_view kPermissionDenied = "permission_denied";
inline constexpr std::string_view kNoSpace = "no_space";
inline constexpr std::string_view kNotADirectory = "not_a_directory";
inline constexpr std::string_view kIsADirectory = "is_a_directory";
inline constexpr std::string_view kNotEmpty = "not_empty";
inline constexpr std::string_view kOffsetGone = "offset_gone";
inline constexpr std::string_view kLimit = "limit";
inline constexpr std::string_view kConnectFailed = "connect_failed";
inline constexpr std::string_view kIoError = "io_error";
inline constexpr std::string_view kNoNetDevice = "no_net_device";
// desktop (docs/agent-protocol.md, "Desktop")
inline constexpr std::string_view kNotInstalled = "not_installed";
inline constexpr std::string_view kStartFailed = "start_failed";
inline constexpr std::string_view kNotRunning = "not_running";
inline constexpr std::string_view kActionFailed = "action_failed";
}  // namespace code

// The error code for a failed system call's errno.
[[nodiscard]] std::string_view code_for_errno(int err);

[[nodiscard]] Json error_message(std::string_view error_code, std::string_view message);
// An Error from a system call as an error message (code from its errno).
[[nodiscard]] Json error_message(const Error& error);

// Parses a JSON frame's text; it must be an object with a string "type".
[[nodiscard]] Result<Json> parse_message(std::string_view text);

// Typed access to request fields: a missing optional field gives the
// default; a present field of the wrong type is an Error naming it.
[[nodiscard]] Result<std::string> get_string(const Json& j, std::string_view key, std::optional<std::string> fallback = {});
[[nodiscard]] Result<std::int64_t> get_int(const Json& j, std::string_view key, std::optional<std::int64_t> fallback = {});
[[nodiscard]] Result<bool> get_bool(const Json& j, std::string_view key, std::optional<bool> fallback = {});

}  // namespace sbx::agent

// Typed reads of what the agent sends (docs/agent-protocol.md, "Host-side
// expectations"). The guest is untrusted: every field the host reads is
// checked for its type and range, and a wrong one is an Error naming it.
// nlohmann's value() and get<>() throw type_error on a field of the wrong
// type, so host code reads replies only through these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "guest-agent/protocol/frame.hpp"  // before messages.hpp: FrameKind::Json
#include "guest-agent/protocol/messages.hpp"

namespace sbx::agent {

// Required fields: missing, null or of the wrong type is an Error.
[[nodiscard]] Result<std::string> reply_string(const Json& reply, std::string_view key);
[[nodiscard]] Result<std::uint64_t> reply_u64(const Json& reply, std::string_view key,
                                              std::uint64_t max = UINT64_MAX);
[[nodiscard]] Result<std::int64_t> reply_i64(const Json& reply, std::string_view key,
                                             std::int64_t min = INT64_MIN, std::int64_t max = INT64_MAX);
[[nodiscard]] Result<bool> reply_bool(const Json& reply, std::string_view key);

// Optional fields: missing or null is nullopt; present and wrong is an Error.
[[nodiscard]] Result<std::optional<std::string>> reply_optional_string(const Json& reply, std::string_view key);
[[nodiscard]] Result<std::optional<std::uint64_t>> reply_optional_u64(const Json& reply, std::string_view key,
                                                                      std::uint64_t max = UINT64_MAX);
[[nodiscard]] Result<std::optional<std::int64_t>> reply_optional_i64(const Json& reply, std::string_view key,
                                                                     std::int64_t min, std::int64_t max);
[[nodiscard]] Result<std::optional<bool>> reply_optional_bool(const Json& reply, std::string_view key);

// The message's "type"; "" when it is not an object with a string "type".
[[nodiscard]] std::string reply_type(const Json& reply);

// An agent's {"type":"error"} message as an Error "<code>: <message>"
// (error_code() gives the code back). A code that is not a lower-case word
// becomes "malformed_error"; the message is made printable and bounded.
// offset_gone's first_offset is kept as " (first_offset N)".
[[nodiscard]] Error agent_error(const Json& error_message);
inline constexpr std::string_view kFirstOffsetMark = " (first_offset ";

// Guest text made safe for a terminal or a log: control characters
// replaced by '?', cut at `max` bytes.
[[nodiscard]] std::string printable(std::string_view text, std::size_t max = 4096);

// A malformed reply: "malformed reply from the agent: <what>".
[[nodiscard]] Error malformed_reply(std::string_view what);

}  // namespace sbx::agent

// The Streamable HTTP transport's rules that depend only on a request's
// headers and body, for sbxd's /mcp (docs/mcp.md, "/mcp"):
// - which revision a POST speaks (2026-07-28 basic/versioning, "Backward
//   Compatibility": a session or a legacy MCP-Protocol-Version or neither
//   header nor _meta is the 2025-11-25 conversation; else stateless);
// - 2026-07-28 transports/streamable-http "Standard headers": the
//   MCP-Protocol-Version, Mcp-Method and Mcp-Name headers must agree with
//   the body (-32020 HeaderMismatch, HTTP 400);
// - the HTTP status that carries a JSON-RPC reply;
// - Origin and Host checks against DNS rebinding (2025-11-25 transports
//   "Security Warning": Origin MUST be validated, 403 when invalid).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host-tools/mcp/api_caller.hpp"

namespace sbx::mcp {

enum class Era { Legacy, Modern };

// The headers a POST came with (nullopt: absent).
struct PostHeaders {
    std::optional<std::string> protocol_version{};  // MCP-Protocol-Version
    std::optional<std::string> method{};            // Mcp-Method
    std::optional<std::string> name{};              // Mcp-Name
    bool has_session = false;                     // MCP-Session-Id
};

[[nodiscard]] Era era_of(const Json& body, const PostHeaders& headers);

// For a 2026-07-28 request: the JSON-RPC error when a required header is
// missing or says something else than the body; nothing when they agree.
// (A _meta that is missing or names another version is the protocol's to
// answer: -32602, -32022.)
[[nodiscard]] std::optional<Json> header_mismatch(const Json& body, const PostHeaders& headers);

// A header value as sent: plain, or `=?base64?<base64 of UTF-8>?=`
// (2026-07-28 "Standard headers"); nothing when the encoding is broken.
[[nodiscard]] std::optional<std::string> decode_header_value(std::string_view value);

// The HTTP status of a JSON-RPC reply: 400 for a message that could not be
// taken (-32700, -32600) and, in 2026-07-28, for -32602, -32020, -32021 and
// -32022; 404 for -32601 in 2026-07-28; else 200.
[[nodiscard]] int http_status(const Json& reply, Era era);

// Origin (RFC 6454 serialization, "null" included) allowed: a loopback
// host (localhost, 127.0.0.0/8, [::1]) on any port, or one of `allowed`
// exactly.
[[nodiscard]] bool origin_allowed(std::string_view origin, const std::vector<std::string>& allowed);
// Host header (RFC 9110 §7.2) allowed: a loopback name, an IP literal, or
// one of `allowed` (a name, with or without the port).
[[nodiscard]] bool host_allowed(std::string_view host, const std::vector<std::string>& allowed);

}  // namespace sbx::mcp

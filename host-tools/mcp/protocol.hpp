// MCP's messages, transport aside: JSON-RPC 2.0 requests in, replies out,
// for both revisions we speak (docs/mcp.md):
// - 2025-11-25 (and 2025-06-18, 2025-03-26): a session opened by
//   `initialize` (basic/lifecycle), then ping, tools/list, tools/call.
// - 2026-07-28: stateless; every request carries params._meta with
//   io.modelcontextprotocol/protocolVersion and clientCapabilities
//   (basic/index "Per-request protocol fields"); server/discover,
//   tools/list, tools/call; results carry resultType.
// A request with that _meta is served statelessly; any other belongs to a
// legacy session (basic/versioning "Backward Compatibility").
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host-tools/mcp/api_caller.hpp"
#include "host-tools/mcp/tools.hpp"

namespace sbx::mcp {

inline constexpr std::string_view kModernVersion = "2026-07-28";
// Newest first: initialize answers the client's version when it is here, else the first.
inline constexpr std::array<std::string_view, 3> kLegacyVersions = {"2025-11-25", "2025-06-18", "2025-03-26"};

// JSON-RPC 2.0 §5.1 and MCP's own codes (2026-07-28 basic/index "Error codes").
namespace rpc {
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kHeaderMismatch = -32020;
inline constexpr int kUnsupportedVersion = -32022;
}  // namespace rpc

struct ServerInfo {
    std::string name = "sandboxer";
    std::string title = "Sandboxer";
    std::string version;
    std::string instructions;
};

// A legacy conversation: a stdio server's whole life, or one HTTP session.
struct Session {
    std::string protocol_version;  // what initialize agreed; empty before
    bool initialized = false;      // notifications/initialized came
};

[[nodiscard]] Json rpc_error(const Json& id, int code, std::string_view message, Json data = nullptr);

// Whether a message carries 2026-07-28's per-request _meta (any version in it).
[[nodiscard]] bool is_modern(const Json& message);

class Protocol {
public:
    Protocol(std::vector<ToolSpec> tools, ServerInfo info, ToolDefaults defaults);

    // One message, the reply if it gets one (a notification or a response
    // from the client gets none). `session` is the legacy conversation the
    // message belongs to (unused by a 2026-07-28 request). `api` makes the
    // tools' calls, as the client that sent the message.
    [[nodiscard]] std::optional<Json> handle(const Json& message, Session& session, ApiCaller& api) const;
    // A line of stdio or an HTTP body: -32700 when it is not JSON.
    [[nodiscard]] std::optional<Json> handle_text(std::string_view text, Session& session, ApiCaller& api) const;

    [[nodiscard]] const std::vector<ToolSpec>& tools() const { return tools_; }
    [[nodiscard]] const ServerInfo& info() const { return info_; }

private:
    [[nodiscard]] Json legacy(const Json& id, const std::string& method, const Json& params, Session& session,
                              ApiCaller& api) const;
    [[nodiscard]] Json modern(const Json& id, const std::string& method, const Json& params, ApiCaller& api) const;
    [[nodiscard]] Json tools_list() const;
    // The CallToolResult, or a JSON-RPC error for an unknown tool.
    [[nodiscard]] Json call_tool(const Json& id, const Json& params, ApiCaller& api) const;

    std::vector<ToolSpec> tools_;
    ServerInfo info_;
    ToolDefaults defaults_;
};

}  // namespace sbx::mcp

// /mcp: MCP over Streamable HTTP on sbxd's own listeners (docs/mcp.md,
// "/mcp"), for the same callers as /v1 with the same keys. Serves
// 2025-11-25 (initialize opens a session: MCP-Session-Id, 404 once it is
// gone, DELETE ends it) and 2026-07-28 (stateless; its headers checked
// against the body) on one endpoint, POST answered with one JSON object;
// GET is 405 (no server-initiated stream). Every tool call is one or a few
// requests to ApiService made in-process with the caller's own
// Authorization, transport and scope, so each is authorized and logged as
// if the client had sent it.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "host-tools/mcp/http_rules.hpp"
#include "host-tools/mcp/protocol.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"

namespace sbx::sbxd {

struct McpOptions {
    std::vector<std::string> allowed_origins;  // beyond loopback ones (docs/mcp.md, "Origin and Host")
    std::vector<std::string> allowed_hosts;    // Host names beyond loopback names and IP literals
    std::size_t max_body_bytes = 8u << 20;     // write_file's 5 MiB as base64, and room
    std::size_t max_sessions = 1024;           // past it the least recently used goes
    std::chrono::minutes session_idle{60};     // an unused session is forgotten after this
};

class McpEndpoint {
public:
    McpEndpoint(const ApiService& service, mcp::ServerInfo info, McpOptions options);

    // POST, GET and DELETE /mcp; the request was authenticated by ApiService.
    [[nodiscard]] http::Response handle(const http::Request& request) const;

private:
    struct SessionEntry {
        mcp::Session session;
        std::string owner;  // the key that opened it ("unix" on the socket): only it may use it
        std::chrono::steady_clock::time_point last_used;
    };

    [[nodiscard]] http::Response post(const http::Request& request) const;
    [[nodiscard]] http::Response end_session(const http::Request& request) const;
    // Runs `message` in the session named by the request; a 4xx when it has none or another's.
    [[nodiscard]] http::Response in_session(const http::Request& request, const mcp::Json& message,
                                            mcp::ApiCaller& api) const;
    [[nodiscard]] std::string open_session(const http::Request& request, mcp::Session session) const;

    const ApiService& service_;
    mcp::Protocol protocol_;
    McpOptions options_;
    mutable std::mutex mutex_;
    mutable std::map<std::string, SessionEntry, std::less<>> sessions_;
};

}  // namespace sbx::sbxd

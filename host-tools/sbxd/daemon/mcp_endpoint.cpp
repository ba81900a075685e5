#include "host-tools/sbxd/daemon/mcp_endpoint.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/daemon/service_caller.hpp"

namespace sbx::sbxd {

namespace {

using http::Request;
using http::Response;
using mcp::Json;

// A header's value, or nothing when the request has none (an empty value is a value).
std::optional<std::string> header_of(const Request& request, std::string_view name) {
    for (const auto& [key, value] : request.headers) {
        if (key.size() == name.size() && std::equal(key.begin(), key.end(), name.begin(), [](char a, char b) {
                return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
            })) {
            return value;
        }
    }
    return std::nullopt;
}

// A JSON-RPC message as the whole answer (MCP POST: application/json).
Response rpc_response(int status, const Json& message) {
    Response response;
    response.status = status;
    response.body = message.dump(-1, ' ', false, Json::error_handler_t::replace);
    return response;
}

// An HTTP-level refusal: a JSON-RPC error without an id (the request was not read as one).
Response refuse(int status, std::string_view message, int code = mcp::rpc::kInvalidRequest) {
    return rpc_response(status, mcp::rpc_error(nullptr, code, message));
}

std::string owner_of(const Request& request) { return request.principal.key().value_or("unix"); }

bool accepts_both(std::string_view accept) {
    // 2025-11-25 transports: the client MUST list both; */* (curl's default) stands for both.
    const bool all = accept.find("*/*") != std::string_view::npos;
    return all || (accept.find("application/json") != std::string_view::npos &&
                   accept.find("text/event-stream") != std::string_view::npos);
}

}  // namespace

McpEndpoint::McpEndpoint(const ApiService& service, mcp::ServerInfo info, McpOptions options)
    : service_(service), protocol_(mcp::sandbox_tools(), std::move(info), mcp::ToolDefaults{}),
      options_(std::move(options)) {}

Response McpEndpoint::handle(const Request& request) const {
    // DNS rebinding (2025-11-25 transports "Security Warning"): a browser
    // page's request names its own origin and the host it resolved.
    if (auto origin = header_of(request, "Origin"); origin && !mcp::origin_allowed(*origin, options_.allowed_origins)) {
        return refuse(403, fmt::format("Forbidden: Origin {} is not allowed (sbxd --mcp-allowed-origin)", *origin));
    }
    if (request.transport == http::Transport::Tcp) {
        if (auto host = header_of(request, "Host"); host && !mcp::host_allowed(*host, options_.allowed_hosts)) {
            return refuse(403, fmt::format("Forbidden: Host {} is not allowed (sbxd --mcp-allowed-host)", *host));
        }
    }
    if (request.method == "POST") {
        return post(request);
    }
    if (request.method == "DELETE") {
        return end_session(request);
    }
    // GET: no server-initiated stream (2025-11-25 transports: 405 is the answer).
    Response response = refuse(405, "Method Not Allowed: POST a JSON-RPC message (no GET stream here)");
    response.headers.emplace_back("Allow", "POST, DELETE");
    return response;
}

Response McpEndpoint::post(const Request& request) const {
    if (!accepts_both(header_of(request, "Accept").value_or(""))) {
        return refuse(406, "Not Acceptable: Accept must list application/json and text/event-stream");
    }
    if (auto type = header_of(request, "Content-Type"); type && !type->starts_with("application/json")) {
        return refuse(415, "Unsupported Media Type: the body is one JSON-RPC message (application/json)");
    }
    // The body streams in (the route's BodyMode) so that its limit is ours.
    std::string text;
    std::array<std::uint8_t, 65536> buffer{};
    while (request.body_stream) {
        auto n = request.body_stream->read(buffer);
        if (!n) {
            return refuse(400, fmt::format("the body could not be read: {}", n.error().message));
        }
        if (*n == 0) {
            break;
        }
        if (text.size() + *n > options_.max_body_bytes) {
            return refuse(413, fmt::format("the body is over {} bytes", options_.max_body_bytes));
        }
        text.append(reinterpret_cast<const char*>(buffer.data()), *n);
    }
    const Json message = Json::parse(text, nullptr, false);
    if (message.is_discarded()) {
        return refuse(400, "Parse error: the body is not JSON", mcp::rpc::kParseError);
    }
    if (!message.is_object()) {
        return refuse(400, "Invalid Request: one JSON-RPC message per POST (no batches)");
    }
    mcp::PostHeaders headers{header_of(request, "MCP-Protocol-Version"), header_of(request, "Mcp-Method"),
                             header_of(request, "Mcp-Name"), header_of(request, "MCP-Session-Id").has_value()};
    ServiceCaller api(service_, request);
    const mcp::Era era = mcp::era_of(message, headers);
    if (era == mcp::Era::Modern) {
        // 2026-07-28: sessions do not exist; the headers must agree with the body.
        if (auto mismatch = mcp::header_mismatch(message, headers)) {
            return rpc_response(400, *mismatch);
        }
        mcp::Session none;
        auto reply = protocol_.handle(message, none, api);
        if (!reply) {
            return Response{202, "", {}, {}, {}};
        }
        return rpc_response(mcp::http_status(*reply, era), *reply);
    }
    if (headers.protocol_version) {
        const auto& known = mcp::kLegacyVersions;
        if (std::find(known.begin(), known.end(), *headers.protocol_version) == known.end()) {
            return refuse(400, fmt::format("Bad Request: unsupported MCP-Protocol-Version {}", *headers.protocol_version));
        }
    }
    if (message.value("method", Json()) == "initialize" && message.contains("id")) {
        mcp::Session session;
        auto reply = protocol_.handle(message, session, api);
        if (!reply) {
            return Response{202, "", {}, {}, {}};
        }
        Response response = rpc_response(mcp::http_status(*reply, era), *reply);
        if (!reply->contains("error")) {
            response.headers.emplace_back("MCP-Session-Id", open_session(request, std::move(session)));
        }
        return response;
    }
    return in_session(request, message, api);
}

Response McpEndpoint::in_session(const Request& request, const Json& message, mcp::ApiCaller& api) const {
    const auto id = header_of(request, "MCP-Session-Id");
    if (!id) {
        return refuse(400, "Bad Request: no MCP-Session-Id (send initialize first)");
    }
    mcp::Session session;
    {
        std::lock_guard lock(mutex_);
        auto it = sessions_.find(*id);
        if (it == sessions_.end() || it->second.owner != owner_of(request)) {
            return refuse(404, "Not Found: no such session (it ended, or sbxd restarted): initialize again");
        }
        it->second.last_used = std::chrono::steady_clock::now();
        session = it->second.session;
    }
    auto reply = protocol_.handle(message, session, api);
    {
        std::lock_guard lock(mutex_);
        if (auto it = sessions_.find(*id); it != sessions_.end()) {
            it->second.session = session;  // notifications/initialized
        }
    }
    if (!reply) {
        return Response{202, "", {}, {}, {}};  // a notification or a response: accepted
    }
    return rpc_response(mcp::http_status(*reply, mcp::Era::Legacy), *reply);
}

std::string McpEndpoint::open_session(const Request& request, mcp::Session session) const {
    // 2025-11-25: globally unique and cryptographically secure, visible ASCII.
    auto hex = random_hex(16);
    const std::string id = "mcp_" + (hex ? *hex : fmt::format("{}", std::chrono::steady_clock::now().time_since_epoch().count()));
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    std::erase_if(sessions_, [&](const auto& entry) { return now - entry.second.last_used > options_.session_idle; });
    while (sessions_.size() >= options_.max_sessions) {
        sessions_.erase(std::min_element(sessions_.begin(), sessions_.end(), [](const auto& a, const auto& b) {
            return a.second.last_used < b.second.last_used;
        }));
    }
    sessions_.emplace(id, SessionEntry{std::move(session), owner_of(request), now});
    return id;
}

Response McpEndpoint::end_session(const Request& request) const {
    const auto id = header_of(request, "MCP-Session-Id");
    if (!id) {
        return refuse(400, "Bad Request: DELETE ends the session its MCP-Session-Id names");
    }
    std::lock_guard lock(mutex_);
    auto it = sessions_.find(*id);
    if (it == sessions_.end() || it->second.owner != owner_of(request)) {
        return refuse(404, "Not Found: no such session");
    }
    sessions_.erase(it);
    return Response{204, "", {}, {}, {}};
}

}  // namespace sbx::sbxd

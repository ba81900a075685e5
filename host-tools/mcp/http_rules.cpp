#include "host-tools/mcp/http_rules.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "base/base64.hpp"
#include "host-tools/mcp/protocol.hpp"

namespace sbx::mcp {

namespace {

bool legacy_version(std::string_view v) {
    return std::find(kLegacyVersions.begin(), kLegacyVersions.end(), v) != kLegacyVersions.end() ||
           v == "2024-11-05";
}

Json mismatch(const Json& body, std::string message) {
    return rpc_error(body.value("id", Json(nullptr)), rpc::kHeaderMismatch, "Header mismatch: " + message);
}

// The host part of "host[:port]" or "[v6][:port]".
std::string_view host_part(std::string_view authority) {
    if (authority.starts_with('[')) {
        const auto end = authority.find(']');
        return end == std::string_view::npos ? authority : authority.substr(0, end + 1);
    }
    return authority.substr(0, authority.find(':'));
}

bool loopback_host(std::string_view host) {
    if (host == "localhost" || host.ends_with(".localhost") || host == "[::1]") {
        return true;
    }
    in_addr v4{};
    const std::string text(host);
    return ::inet_pton(AF_INET, text.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

bool ip_literal(std::string_view host) {
    in_addr v4{};
    in6_addr v6{};
    if (host.starts_with('[') && host.ends_with(']')) {
        const std::string inner(host.substr(1, host.size() - 2));
        return ::inet_pton(AF_INET6, inner.c_str(), &v6) == 1;
    }
    const std::string text(host);
    return ::inet_pton(AF_INET, text.c_str(), &v4) == 1;
}

}  // namespace

Era era_of(const Json& body, const PostHeaders& headers) {
    if (headers.has_session) {
        return Era::Legacy;
    }
    const bool meta = is_modern(body);
    if (!meta && (!headers.protocol_version || legacy_version(*headers.protocol_version))) {
        return Era::Legacy;
    }
    return Era::Modern;
}

std::optional<std::string> decode_header_value(std::string_view value) {
    if (!value.starts_with("=?base64?") || !value.ends_with("?=") || value.size() < 11) {
        return std::string(value);
    }
    auto decoded = base64_decode(value.substr(9, value.size() - 11));
    if (!decoded) {
        return std::nullopt;
    }
    return *decoded;
}

std::optional<Json> header_mismatch(const Json& body, const PostHeaders& headers) {
    if (!headers.protocol_version) {
        return mismatch(body, "the MCP-Protocol-Version header is required");
    }
    const Json params = body.value("params", Json::object());
    const Json meta = params.is_object() ? params.value("_meta", Json::object()) : Json();
    const Json version = meta.is_object() ? meta.value("io.modelcontextprotocol/protocolVersion", Json()) : Json();
    if (version.is_string() && version != *headers.protocol_version) {
        return mismatch(body, fmt::format("MCP-Protocol-Version header value '{}' does not match body value '{}'",
                                          *headers.protocol_version, version.get<std::string>()));
    }
    const std::string method = string_member(body, "method");
    if (!headers.method) {
        return mismatch(body, "the Mcp-Method header is required");
    }
    if (*headers.method != method) {
        return mismatch(body, fmt::format("Mcp-Method header value '{}' does not match body value '{}'", *headers.method,
                                          method));
    }
    if (method == "tools/call" || method == "prompts/get" || method == "resources/read") {
        const Json name = params.is_object() ? params.value(method == "resources/read" ? "uri" : "name", Json()) : Json();
        if (!headers.name) {
            return mismatch(body, fmt::format("the Mcp-Name header is required for {}", method));
        }
        const auto decoded = decode_header_value(*headers.name);
        if (!decoded) {
            return mismatch(body, "the Mcp-Name header's =?base64?…?= value is not base64");
        }
        if (!name.is_string() || *decoded != name.get<std::string>()) {
            return mismatch(body, fmt::format("Mcp-Name header value '{}' does not match body value '{}'", *decoded,
                                              name.is_string() ? name.get<std::string>() : name.dump()));
        }
    }
    return std::nullopt;
}

int http_status(const Json& reply, Era era) {
    if (!reply.contains("error")) {
        return 200;
    }
    const int code = reply["error"].value("code", 0);
    if (code == rpc::kParseError || code == rpc::kInvalidRequest) {
        return 400;
    }
    if (era == Era::Modern) {
        if (code == rpc::kMethodNotFound) {
            return 404;
        }
        if (code == rpc::kInvalidParams || code == rpc::kHeaderMismatch || code == -32021 ||
            code == rpc::kUnsupportedVersion) {
            return 400;  // the request was malformed (an unknown tool too: invalid params)
        }
    }
    return 200;
}

bool origin_allowed(std::string_view origin, const std::vector<std::string>& allowed) {
    if (std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) {
        return true;
    }
    for (std::string_view scheme : {"http://", "https://"}) {
        if (origin.starts_with(scheme)) {
            return loopback_host(host_part(origin.substr(scheme.size())));
        }
    }
    return false;
}

bool host_allowed(std::string_view host, const std::vector<std::string>& allowed) {
    const std::string_view name = host_part(host);
    if (loopback_host(name) || ip_literal(name)) {
        return true;
    }
    return std::any_of(allowed.begin(), allowed.end(),
                       [&](const std::string& a) { return a == host || a == name; });
}

}  // namespace sbx::mcp

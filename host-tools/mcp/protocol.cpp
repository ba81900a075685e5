#include "host-tools/mcp/protocol.hpp"

#include <algorithm>
#include <exception>

#include <fmt/format.h>

#include "host-tools/mcp/schema_check.hpp"

namespace sbx::mcp {

namespace {

constexpr const char* kVersionKey = "io.modelcontextprotocol/protocolVersion";
constexpr const char* kCapabilitiesKey = "io.modelcontextprotocol/clientCapabilities";
constexpr const char* kServerInfoKey = "io.modelcontextprotocol/serverInfo";
// tools/list never changes while a server runs; an hour is what the spec's examples use.
constexpr std::int64_t kListTtlMs = 3'600'000;

Json result(const Json& id, Json body) { return Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(body)}}; }

bool valid_id(const Json& id) { return id.is_string() || id.is_number_integer(); }

}  // namespace

Json rpc_error(const Json& id, int code, std::string_view message, Json data) {
    Json error = {{"code", code}, {"message", message}};
    if (!data.is_null()) {
        error["data"] = std::move(data);
    }
    return Json{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(error)}};
}

bool is_modern(const Json& message) {
    if (!message.is_object()) {
        return false;
    }
    auto params = message.find("params");
    if (params == message.end() || !params->is_object()) {
        return false;
    }
    auto meta = params->find("_meta");
    return meta != params->end() && meta->is_object() && meta->contains(kVersionKey);
}

Protocol::Protocol(std::vector<ToolSpec> tools, ServerInfo info, ToolDefaults defaults)
    : tools_(std::move(tools)), info_(std::move(info)), defaults_(std::move(defaults)) {}

std::optional<Json> Protocol::handle_text(std::string_view text, Session& session, ApiCaller& api) const {
    Json message = Json::parse(text, nullptr, false);
    if (message.is_discarded()) {
        return rpc_error(nullptr, rpc::kParseError, "Parse error: not JSON");
    }
    return handle(message, session, api);
}

std::optional<Json> Protocol::handle(const Json& message, Session& session, ApiCaller& api) const {
    // JSON-RPC 2.0 §4: a request has a method and an id; a notification no
    // id. MCP has no batches since 2025-06-18.
    if (!message.is_object() || message.value("jsonrpc", Json()) != "2.0") {
        return rpc_error(nullptr, rpc::kInvalidRequest, "Invalid Request: not a JSON-RPC 2.0 object");
    }
    auto method_it = message.find("method");
    if (method_it == message.end()) {
        return std::nullopt;  // a response to a request of ours: we send none
    }
    const bool has_id = message.contains("id");
    const Json id = has_id ? message["id"] : Json(nullptr);
    if (!method_it->is_string() || (has_id && !valid_id(id))) {
        return rpc_error(valid_id(id) ? id : Json(nullptr), rpc::kInvalidRequest,
                         "Invalid Request: method must be a string, id a string or an integer");
    }
    const std::string method = method_it->get<std::string>();
    const Json params = message.value("params", Json::object());
    if (!params.is_object()) {
        return has_id ? std::optional(rpc_error(id, rpc::kInvalidParams, "params must be an object")) : std::nullopt;
    }
    if (!has_id) {
        if (method == "notifications/initialized") {
            session.initialized = true;
        }
        return std::nullopt;  // notifications/cancelled and others: nothing to answer
    }
    if (is_modern(message) || method == "server/discover") {
        return modern(id, method, params, api);
    }
    return legacy(id, method, params, session, api);
}

Json Protocol::legacy(const Json& id, const std::string& method, const Json& params, Session& session,
                      ApiCaller& api) const {
    if (method == "initialize") {
        // basic/lifecycle "Version Negotiation": the client's version when we
        // speak it, else our newest.
        const std::string asked = string_member(params, "protocolVersion");
        const bool known = std::find(kLegacyVersions.begin(), kLegacyVersions.end(), asked) != kLegacyVersions.end();
        session.protocol_version = known ? asked : std::string(kLegacyVersions.front());
        Json server = {{"name", info_.name}, {"title", info_.title}, {"version", info_.version}};
        Json body = {{"protocolVersion", session.protocol_version},
                     {"capabilities", {{"tools", {{"listChanged", false}}}}},
                     {"serverInfo", server}};
        if (!info_.instructions.empty()) {
            body["instructions"] = info_.instructions;
        }
        return result(id, body);
    }
    if (method == "ping") {
        return result(id, Json::object());
    }
    if (method == "tools/list") {
        if (params.contains("cursor")) {
            return rpc_error(id, rpc::kInvalidParams, "Invalid cursor: tools/list has one page");
        }
        return result(id, tools_list());
    }
    if (method == "tools/call") {
        return call_tool(id, params, api);
    }
    return rpc_error(id, rpc::kMethodNotFound, fmt::format("Method not found: {}", method));
}

Json Protocol::modern(const Json& id, const std::string& method, const Json& params, ApiCaller& api) const {
    const Json meta = params.value("_meta", Json::object());
    const Json version = meta.is_object() ? meta.value(kVersionKey, Json()) : Json();
    if (!version.is_string() || !meta.contains(kCapabilitiesKey) || !meta[kCapabilitiesKey].is_object()) {
        return rpc_error(id, rpc::kInvalidParams,
                         fmt::format("Invalid params: _meta needs {} (a string) and {} (an object)", kVersionKey,
                                     kCapabilitiesKey));
    }
    if (version != kModernVersion) {
        return rpc_error(id, rpc::kUnsupportedVersion,
                         fmt::format("Unsupported protocol version {}", version.get<std::string>()),
                         Json{{"supported", Json::array({kModernVersion})}, {"requested", version}});
    }
    Json body;
    if (method == "server/discover") {
        Json supported = Json::array({kModernVersion});
        for (auto v : kLegacyVersions) {
            supported.push_back(v);
        }
        body = {{"supportedVersions", supported},
                {"capabilities", {{"tools", Json::object()}}},
                {"ttlMs", kListTtlMs},
                {"cacheScope", "public"}};
        if (!info_.instructions.empty()) {
            body["instructions"] = info_.instructions;
        }
    } else if (method == "tools/list") {
        if (params.contains("cursor")) {
            return rpc_error(id, rpc::kInvalidParams, "Invalid cursor: tools/list has one page");
        }
        body = tools_list();
        body["ttlMs"] = kListTtlMs;
        body["cacheScope"] = "public";
    } else if (method == "tools/call") {
        Json reply = call_tool(id, params, api);
        if (!reply.contains("result")) {
            return reply;
        }
        body = std::move(reply["result"]);
    } else {
        // initialize, ping, logging/setLevel… do not exist in 2026-07-28.
        return rpc_error(id, rpc::kMethodNotFound,
                         fmt::format("Method not found: {} (this server speaks {} statelessly, and {} through "
                                     "initialize)", method, kModernVersion, kLegacyVersions.front()));
    }
    body["resultType"] = "complete";
    body["_meta"][kServerInfoKey] = {{"name", info_.name}, {"title", info_.title}, {"version", info_.version}};
    return result(id, std::move(body));
}

Json Protocol::tools_list() const {
    Json tools = Json::array();
    for (const ToolSpec& tool : tools_) {
        Json annotations = tool.annotations;
        annotations["title"] = tool.title;
        tools.push_back({{"name", tool.name},
                         {"title", tool.title},
                         {"description", tool.description},
                         {"inputSchema", tool.input_schema},
                         {"outputSchema", tool.output_schema},
                         {"annotations", annotations}});
    }
    return Json{{"tools", tools}};
}

Json Protocol::call_tool(const Json& id, const Json& params, ApiCaller& api) const {
    const Json name = params.value("name", Json());
    auto tool = std::find_if(tools_.begin(), tools_.end(),
                             [&](const ToolSpec& t) { return name.is_string() && t.name == name.get<std::string>(); });
    if (tool == tools_.end()) {
        return rpc_error(id, rpc::kInvalidParams, fmt::format("Unknown tool: {}", name.is_string() ? name.get<std::string>() : name.dump()));
    }
    const Json arguments = params.contains("arguments") && !params["arguments"].is_null() ? params["arguments"] : Json::object();
    // A tool's failure is its result with isError (server/tools "Error
    // Handling"), so that the model sees it; the API's code leads the text.
    auto failure = [](std::string_view code, std::string_view message) {
        const Json error = {{"error", {{"code", code}, {"message", message}}}};
        return Json{{"content", Json::array({{{"type", "text"}, {"text", error.dump(-1, ' ', false, Json::error_handler_t::replace)}}})},
                    {"isError", true}};
    };
    if (auto bad = schema_violation(tool->input_schema, arguments)) {
        return result(id, failure("invalid_argument", *bad));
    }
    ToolContext context{api, defaults_, {}};
    Result<Json> outcome = make_error("not run");
    try {
        outcome = tool->run(arguments, context);
    } catch (const std::exception& e) {  // a JSON type error in a tool: a bug of ours, the server goes on
        return result(id, failure("internal", fmt::format("{} failed: {}", tool->name, e.what())));
    }
    if (!outcome) {
        return result(id, failure(outcome.error().code.empty() ? "internal" : outcome.error().code,
                                  outcome.error().message));
    }
    // server/tools "Structured Content": the same JSON as a text block too.
    Json content = Json::array({{{"type", "text"}, {"text", outcome->dump(-1, ' ', false, Json::error_handler_t::replace)}}});
    for (Json& block : context.content) {
        content.push_back(std::move(block));
    }
    return result(id, Json{{"content", std::move(content)}, {"structuredContent", *outcome}, {"isError", false}});
}

}  // namespace sbx::mcp

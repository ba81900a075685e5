#include "host-tools/mcp/tools.hpp"

#include <fmt/format.h>

namespace sbx::mcp {

std::vector<ToolSpec> sandbox_tools() {
    std::vector<ToolSpec> tools;
    add_sandbox_tools(tools);
    add_exec_tools(tools);
    add_file_tools(tools);
    add_desktop_tools(tools);
    return tools;
}

Json schema(const char* text) { return Json::parse(text); }

std::string with_id(const char* properties, const char* required) {
    return fmt::format(R"({{"type":"object","additionalProperties":false,"required":{},
      "properties":{{"sandbox":{{"type":"string","minLength":1,"maxLength":128,
      "description":"The sandbox's id (sbx_…), as sandbox_create or sandbox_list gave it"}}{}}}}})",
                       required, properties);
}

Json hints(bool read_only, bool destructive, bool idempotent) {
    Json out = {{"readOnlyHint", read_only}, {"openWorldHint", false}};
    if (!read_only) {  // MCP 2025-11-25: meaningful only when not read-only
        out["destructiveHint"] = destructive;
        out["idempotentHint"] = idempotent;
    }
    return out;
}

std::string sandbox_path(const Json& arguments, std::string_view rest) {
    return "/v1/sandboxes/" + url_encode(arguments.at("sandbox").get<std::string>()) + std::string(rest);
}

Json member(const Json& object, const char* name) {
    auto it = object.find(name);
    return it == object.end() ? Json(nullptr) : *it;
}

Json keep(const Json& answer, const std::vector<const char*>& names) {
    Json out = Json::object();
    for (const char* name : names) {
        if (answer.contains(name)) {
            out[name] = answer[name];
        }
    }
    return out;
}

}  // namespace sbx::mcp

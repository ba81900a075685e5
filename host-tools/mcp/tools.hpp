// The MCP tools (docs/mcp.md has the list): each a name, its JSON Schemas
// (input and structured output), annotations (MCP 2025-11-25 ToolAnnotations)
// and a function of its checked arguments that makes the API calls. A
// tool's failure is an Error whose code is the API's (docs/api.md
// "Errors") or the tool's own ("invalid_argument", "too_large").
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host-tools/mcp/api_caller.hpp"

namespace sbx::mcp {

// What a create gets when the tool's arguments leave it out (`sbx mcp
// --size …`, sbxd's [mcp] settings).
struct ToolDefaults {
    std::string size;                       // empty: sbxd's own default
    std::string ttl;                        // "30m"; empty: sbxd's default (1 h)
    std::optional<unsigned> idle_minutes;   // idle pause
    std::map<std::string, std::string> labels;  // put on every sandbox made through MCP
    // How the user reaches sbxd from a shell, for handoff_session's commands.
    std::string sbx_command = "sbx";
};

struct ToolContext {
    ApiCaller& api;
    const ToolDefaults& defaults;
    // Content blocks a tool adds after its result's JSON text, e.g. a
    // screenshot as ImageContent (MCP 2025-06-18 server/tools "Tool Result").
    std::vector<Json> content;
};

struct ToolSpec {
    std::string name;
    std::string title;
    std::string description;
    Json input_schema;
    Json output_schema;
    Json annotations;
    // Runs with arguments that passed input_schema; the structured result.
    std::function<Result<Json>(const Json& arguments, ToolContext& context)> run;
};

// initialize's and server/discover's `instructions`: how the tools fit together.
inline constexpr const char* kInstructions =
    "Each sandbox is a disposable Linux microVM (Debian with Docker, Python, Node.js, Go, Rust and Chromium; "
    "commands run as a user with passwordless sudo; its own disk and network) on this host. "
    "sandbox_create makes one in about a second; exec runs a command and returns its output; read_file, "
    "write_file and list_files move files; exec_start runs long jobs (exec_output reads them from an "
    "offset); host_port gives a web app an HTTPS URL; sandbox_stop keeps everything for later, "
    "sandbox_fork copies a running sandbox; desktop_start opens a graphical desktop that desktop_action drives "
    "(screenshots, clicks, typing). Delete sandboxes you no longer need.";

// Every tool, in a fixed order (MCP 2026-07-28 tools/list SHOULD be deterministic).
[[nodiscard]] std::vector<ToolSpec> sandbox_tools();

// tools_sandbox.cpp, tools_exec.cpp, tools_files.cpp, tools_desktop.cpp: the groups.
void add_sandbox_tools(std::vector<ToolSpec>& tools);
void add_exec_tools(std::vector<ToolSpec>& tools);
void add_file_tools(std::vector<ToolSpec>& tools);
void add_desktop_tools(std::vector<ToolSpec>& tools);

// Helpers the groups share (tools.cpp).
// A schema from JSON text (the tables in the tool files).
[[nodiscard]] Json schema(const char* text);
// An input schema's text: the sandbox's id, then `properties` (JSON members,
// each after a comma), `required` of them all, no other field.
[[nodiscard]] std::string with_id(const char* properties, const char* required = R"(["sandbox"])");
// {"readOnlyHint":…,"destructiveHint":…,"idempotentHint":…,"openWorldHint":false}:
// every tool acts on this host's sandboxes only.
[[nodiscard]] Json hints(bool read_only, bool destructive, bool idempotent);
// /v1/sandboxes/{id}, the id percent-encoded; `rest` appended as given.
[[nodiscard]] std::string sandbox_path(const Json& arguments, std::string_view rest = "");
// A value of the API's answer, or null.
[[nodiscard]] Json member(const Json& object, const char* name);
// The members of the API's answer named, those it has.
[[nodiscard]] Json keep(const Json& answer, const std::vector<const char*>& names);

}  // namespace sbx::mcp

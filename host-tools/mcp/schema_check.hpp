// Tool arguments checked against the tool's own inputSchema before the
// tool runs, so a model's mistake comes back as a tool error naming the
// field (MCP 2025-11-25 server/tools: input validation errors are tool
// execution errors). Only the subset of JSON Schema 2020-12 that our
// schemas use is understood (kKeywords); mcp_test checks that every
// schema stays inside it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sbx::mcp {

// The first way `value` breaks `schema`, naming where ("command[1]: ..."),
// or nothing.
[[nodiscard]] std::optional<std::string> schema_violation(const nlohmann::json& schema,
                                                          const nlohmann::json& value);
// Keywords in `schema` (at any depth) outside the understood subset.
[[nodiscard]] std::vector<std::string> unknown_keywords(const nlohmann::json& schema);

// Whether `bytes` is well-formed UTF-8 (RFC 3629 §4: no overlongs, no
// surrogates, nothing past U+10FFFF).
[[nodiscard]] bool is_utf8(std::string_view bytes);
// `bytes` with every ill-formed sequence replaced by U+FFFD.
[[nodiscard]] std::string to_utf8(std::string_view bytes);

}  // namespace sbx::mcp

// `sbx desktop ID ACTION ARGS…` as the body of POST …/desktop/actions
// (docs/sbx.md, "desktop"; the actions are Anthropic's computer-use
// tool's, docs/agent-protocol.md "Desktop"). Pure: sbxd and the agent
// check every value again; these only catch what the CLI must parse.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "host-tools/sbx/api_requests.hpp"

namespace sbx::cli {

struct DesktopFlags {
    std::string button = "left";  // click --button left|right|middle
    bool double_click = false;    // click --double
    bool triple_click = false;    // click --triple
};

// `words` after the ID: `click X Y`, `move X Y`, `type TEXT`, `key KEYS`,
// `scroll X Y DIR [N]` (N default 3), `cursor`. Code "usage" for anything
// else, naming what is wrong.
[[nodiscard]] Result<Json> desktop_action_body(const std::vector<std::string>& words, const DesktopFlags& flags);

}  // namespace sbx::cli

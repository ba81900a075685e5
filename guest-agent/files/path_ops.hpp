// The file ops on paths rather than contents: stat, list, mkdir, remove,
// rename (registered by register_file_ops).
#pragma once

#include "guest-agent/agent/agent.hpp"

namespace sbx::agent::files {

void register_path_ops(OpTable& ops);

}  // namespace sbx::agent::files

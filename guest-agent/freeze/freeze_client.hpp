// The host side of the freeze and thaw ops (docs/agent-protocol.md,
// "freeze, thaw"): the mount points the call froze or thawed.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "guest-agent/client/agent_client.hpp"

namespace sbx::agent {

// The guest thaws by itself `timeout` after the freeze unless thawed.
[[nodiscard]] Result<std::vector<std::string>> freeze_filesystems(
    AgentClient& client, std::chrono::milliseconds timeout = std::chrono::seconds(60));
[[nodiscard]] Result<std::vector<std::string>> thaw_filesystems(AgentClient& client);

}  // namespace sbx::agent

// Detached processes and their retained output (docs/agent-protocol.md,
// "Detached processes"). Owned by the exec engineer; this is the seed.
#pragma once

namespace sbx::agent {

class ProcessTable {
public:
    ProcessTable() = default;
};

}  // namespace sbx::agent

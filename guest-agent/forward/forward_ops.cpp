// Seed: the forward engineer replaces this file.
#include "guest-agent/agent/agent.hpp"

namespace sbx::agent {
void register_forward_ops(OpTable&) {}

}  // namespace sbx::agent

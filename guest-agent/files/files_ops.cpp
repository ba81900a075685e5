// Seed: the files engineer replaces this file.
#include "guest-agent/agent/agent.hpp"

namespace sbx::agent {
void register_file_ops(OpTable&) {}
void register_tar_ops(OpTable&) {}
}  // namespace sbx::agent

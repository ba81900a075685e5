// The requests sbx-vmm's control socket serves over its one VM
// (docs/vmm-control.md): status, pause, resume, snapshot, stop.
#pragma once

#include <nlohmann/json.hpp>

#include "vmm/config.hpp"
#include "vmm/vm.hpp"

namespace sbx {

// Replies {"ok": true, ...} or ControlServer::error_reply. Thread-safe
// against the running VM (pause/resume/save go through Vm's own locking).
[[nodiscard]] nlohmann::json handle_control_request(Vm& vm, const VmConfig& config, const nlohmann::json& request);

}  // namespace sbx

// The requests sbx-vmm's control socket serves over its one VM
// (docs/vmm-control.md): status, pause, resume, snapshot, stop.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "vmm/config.hpp"
#include "vmm/vm.hpp"

namespace sbx {

struct ControlOptions {
    // Where snapshots may be written (canonical_snapshot_dir); empty: the
    // snapshot op is refused.
    std::string snapshot_dir;
};

// Replies {"ok": true, ...} or ControlServer::error_reply. Thread-safe
// against the running VM (pause/resume/save go through Vm's own locking).
[[nodiscard]] nlohmann::json handle_control_request(Vm& vm, const VmConfig& config, const ControlOptions& options,
                                                    const nlohmann::json& request);

}  // namespace sbx

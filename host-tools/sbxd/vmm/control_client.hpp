// sbxd's side of the VMM control socket (docs/vmm-control.md): one JSON
// request line, one JSON reply line, within a deadline, so that a VMM that
// hangs never holds a worker for ever.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.hpp"

namespace sbx::sbxd {

inline constexpr std::chrono::milliseconds kControlTimeout{30'000};
// Writing a raw snapshot of several GiB under the nested harness.
inline constexpr std::chrono::milliseconds kSnapshotTimeout{600'000};

// Connects, sends `request` and returns the reply when it has "ok": true.
// An error reply is an Error with the VMM's code ("vm_not_paused", ...);
// no reply within `timeout` is "timeout"; no socket or a closed one is
// "vmm_unreachable".
[[nodiscard]] Result<nlohmann::json> control_call(const std::string& socket_path,
                                                  const nlohmann::json& request,
                                                  std::chrono::milliseconds timeout = kControlTimeout);

}  // namespace sbx::sbxd

// A sandbox's lifecycle (docs/sbxd.md, "States"): the states, the allowed
// transitions as one table, and the pure check every state change goes
// through (the store refuses any other change inside its transaction).
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace sbx::sbxd {

enum class SandboxState {
    Creating,  // folder, disk and VMM being set up; ends running or crashed
    Running,   // a VMM with an agent-ready guest
    Stopping,  // memory and devices going to disk (or the VMM ending, disk-only)
    Stopped,   // no VMM; disk (and memory snapshot, when stopped with memory)
    Paused,    // stopped with memory by the idle timer; woken by the next API call
    Crashed,   // the VMM died or a create/resume failed; disk intact
    Deleting,  // folder being removed; the row goes when it is gone
};

inline constexpr SandboxState kAllSandboxStates[] = {
    SandboxState::Creating, SandboxState::Running, SandboxState::Stopping, SandboxState::Stopped,
    SandboxState::Paused,   SandboxState::Crashed, SandboxState::Deleting,
};

[[nodiscard]] std::string_view to_string(SandboxState state);
[[nodiscard]] std::optional<SandboxState> parse_sandbox_state(std::string_view name);

struct Transition {
    SandboxState from;
    SandboxState to;
};

// Every allowed change; anything else is refused.
[[nodiscard]] std::span<const Transition> allowed_transitions();
[[nodiscard]] bool can_transition(SandboxState from, SandboxState to);

// States with a VMM process that sbxd must account for (re-adopt after a
// restart, or find dead and mark crashed).
[[nodiscard]] bool has_vmm(SandboxState state);

}  // namespace sbx::sbxd

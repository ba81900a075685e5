#include "host-tools/sbxd/sandbox/state.hpp"

#include <algorithm>

namespace sbx::sbxd {

namespace {

using S = SandboxState;

constexpr Transition kTransitions[] = {
    {S::Creating, S::Running},   // agent ready
    {S::Creating, S::Crashed},   // boot or restore failed; the disk stays for inspection
    {S::Creating, S::Deleting},  // an unfinished create rolled back after a restart
    {S::Creating, S::Stopped},   // a resume cut short before its VMM started, after a restart
    {S::Running, S::Stopping},   // stop, auto-stop (TTL), idle pause
    {S::Running, S::Crashed},    // the VMM exited on its own
    {S::Running, S::Deleting},  {S::Stopping, S::Stopped},  // a user stop or TTL deadline
    {S::Stopping, S::Paused},                               // the idle timer's stop
    {S::Stopping, S::Crashed},                              // the VMM died while saving
    {S::Stopping, S::Running},  // its memory could not be saved (a full disk): the VM runs on
    {S::Stopped, S::Creating},  // resume: a VMM is set up again (restore or cold boot)
    {S::Stopped, S::Deleting},  {S::Paused, S::Creating},  // woken by an API call
    {S::Paused, S::Stopped},  // an explicit stop of a paused sandbox only relabels it
    {S::Paused, S::Deleting},   {S::Crashed, S::Creating},  // resume cold-boots from the disk
    {S::Crashed, S::Deleting},
};

}  // namespace

std::string_view to_string(SandboxState state) {
    switch (state) {
        case S::Creating:
            return "creating";
        case S::Running:
            return "running";
        case S::Stopping:
            return "stopping";
        case S::Stopped:
            return "stopped";
        case S::Paused:
            return "paused";
        case S::Crashed:
            return "crashed";
        case S::Deleting:
            return "deleting";
    }
    return "unknown";
}

std::optional<SandboxState> parse_sandbox_state(std::string_view name) {
    for (SandboxState state : kAllSandboxStates) {
        if (to_string(state) == name) {
            return state;
        }
    }
    return std::nullopt;
}

std::span<const Transition> allowed_transitions() {
    return kTransitions;
}

bool can_transition(SandboxState from, SandboxState to) {
    return std::any_of(std::begin(kTransitions), std::end(kTransitions),
                       [&](const Transition& t) { return t.from == from && t.to == to; });
}

bool has_vmm(SandboxState state) {
    return state == S::Creating || state == S::Running || state == S::Stopping;
}

}  // namespace sbx::sbxd

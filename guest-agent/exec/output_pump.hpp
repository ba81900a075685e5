// Moving a process's output to where it goes (a client's socket for an
// attached exec, the output log for a detached one) as it is produced.
#pragma once

#include <chrono>
#include <functional>
#include <span>

#include "guest-agent/exec/spawn.hpp"
#include "guest-agent/protocol/frame.hpp"

namespace sbx::agent {

// How long output is still read after the process has exited, when
// something else (a background job it started) keeps its stdout or stderr
// open: the exit is then reported without waiting for that to end.
inline constexpr std::chrono::milliseconds kExitGrace{250};

// Reads chunk after chunk (at most kMaxDataPayload bytes each) from the
// process's out and err (or its terminal: all of it is Channel::Stdout)
// and hands each to `sink`, which may block (that is the back-pressure on
// the process). Returns when both reach EOF, or kExitGrace after the
// process exited — having read first everything it wrote before exiting.
// The fds are closed on return.
void pump_output(SpawnedProcess& process,
                 const std::function<void(Channel, std::span<const std::uint8_t>)>& sink);

}  // namespace sbx::agent

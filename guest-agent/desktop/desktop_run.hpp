// Running the desktop's short programs (xdotool, maim, ffmpeg): exec's
// spawn() with a deadline (the reaper kills the group when it passes), the
// output kept up to a bound, and the tail of stderr for error messages.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "guest-agent/exec/spawn.hpp"

namespace sbx::agent {

struct ProgramRun {
    std::string out;          // stdout, at most the bound
    std::string err;          // the last kMaxErrTail bytes of stderr
    ExitStatus status;        // timed_out: killed at plan.timeout
    bool out_over = false;    // stdout passed the bound: the group was killed
};

inline constexpr std::size_t kMaxErrTail = 4096;

// Runs `plan` (its timeout is the deadline) to its end. An Error only when
// it could not be started (spawn()'s).
[[nodiscard]] Result<ProgramRun> run_program(const SpawnPlan& plan, std::size_t max_out);

// The first of program_candidates() that is an executable regular file.
[[nodiscard]] std::optional<std::string> find_program(const std::string& program, std::string_view path);

// The last lines of `text`, at most `max_bytes` of them (cut at a line
// start when one is in reach), without the final line break.
[[nodiscard]] std::string last_lines(std::string_view text, std::size_t max_bytes);

}  // namespace sbx::agent

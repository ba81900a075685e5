#include "guest-agent/desktop/desktop_run.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include "guest-agent/exec/output_pump.hpp"

namespace sbx::agent {

Result<ProgramRun> run_program(const SpawnPlan& plan, std::size_t max_out) {
    auto process = spawn(plan);
    if (!process) {
        return process.error();
    }
    ProgramRun run;
    pump_output(*process, [&](Channel channel, std::span<const std::uint8_t> bytes) {
        const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        if (channel == Channel::Stderr) {
            run.err += text;
            if (run.err.size() > 2 * kMaxErrTail) {
                run.err.erase(0, run.err.size() - kMaxErrTail);
            }
        } else if (!run.out_over) {
            if (text.size() > max_out - run.out.size()) {
                run.out_over = true;
                process->child->signal_group(SIGKILL);
                return;
            }
            run.out += text;
        }
    });
    process->child->wait();
    run.status = process->child->exit_status().value_or(ExitStatus{});
    if (run.err.size() > kMaxErrTail) {
        run.err.erase(0, run.err.size() - kMaxErrTail);
    }
    return run;
}

std::optional<std::string> find_program(const std::string& program, std::string_view path) {
    for (auto& candidate : program_candidates(program, path)) {
        struct stat st {};
        if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
            return std::move(candidate);
        }
    }
    return std::nullopt;
}

std::string last_lines(std::string_view text, std::size_t max_bytes) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
        text.remove_suffix(1);
    }
    if (text.size() > max_bytes) {
        text.remove_prefix(text.size() - max_bytes);
        if (auto nl = text.find('\n'); nl != std::string_view::npos) {
            text.remove_prefix(nl + 1);
        }
    }
    return std::string(text);
}

}  // namespace sbx::agent

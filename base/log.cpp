#include "base/log.hpp"

#include <unistd.h>

#include <cerrno>  // program_invocation_short_name (glibc)

#include <string>

namespace sbx::log {

void write_line(std::string_view level, std::string_view message) {
    // One write(2) per line so lines from different threads do not interleave.
    // Prefixed with the program's name: sbx-vmm, sbx-agent, a test binary.
    std::string line = fmt::format("{}: {}: {}\n", program_invocation_short_name, level, message);
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace sbx::log

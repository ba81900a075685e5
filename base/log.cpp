#include "base/log.hpp"

#include <unistd.h>

#include <string>

namespace sbx::log {

void write_line(std::string_view level, std::string_view message) {
    // One write(2) per line so lines from different threads do not interleave.
    std::string line = fmt::format("sbx-vmm: {}: {}\n", level, message);
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace sbx::log

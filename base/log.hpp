// Minimal logging to stderr: one line per event, prefixed with the level.
// Stateless on purpose: the VMM is a library and must not own global state.
#pragma once

#include <cstdio>
#include <string_view>

#include <fmt/core.h>

namespace sbx::log {

void write_line(std::string_view level, std::string_view message);

template <typename... Args>
void info(fmt::format_string<Args...> fmt, Args&&... args) {
    write_line("info", fmt::format(fmt, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> fmt, Args&&... args) {
    write_line("warn", fmt::format(fmt, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> fmt, Args&&... args) {
    write_line("error", fmt::format(fmt, std::forward<Args>(args)...));
}

}  // namespace sbx::log

#include "host-tools/sbxd/sandbox/process_identity.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>
#include <string_view>

#include "base/unique_fd.hpp"

namespace sbx::sbxd {

namespace {

struct StatFields {
    char state = '?';
    std::int64_t start_time = 0;
};

// The comm field (2) is in parentheses and may hold spaces and ')', so the
// fields after it are counted from the last ')'.
Result<StatFields> read_stat(pid_t pid) {
    // /proc files report size 0, so this reads until EOF.
    auto fd = UniqueFd::open("/proc/" + std::to_string(pid) + "/stat", O_RDONLY);
    if (!fd) {
        return make_coded_error("not_found", "no process {}", pid);
    }
    std::string text;
    char buffer[1024];
    for (;;) {
        ssize_t n = ::read(fd->get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return make_coded_error("not_found", "no process {}", pid);  // ESRCH: it exited meanwhile
        }
        if (n == 0 || text.size() > 4096) {
            break;
        }
        text.append(buffer, static_cast<std::size_t>(n));
    }
    auto close = text.rfind(')');
    if (close == std::string::npos) {
        return make_error("/proc/{}/stat has no command field", pid);
    }
    std::string_view rest = std::string_view(text).substr(close + 1);
    StatFields fields;
    // Fields 3.. follow, space-separated: 3 is the state, 22 the start time.
    int field = 2;
    while (!rest.empty()) {
        while (!rest.empty() && rest.front() == ' ') {
            rest.remove_prefix(1);
        }
        auto end = rest.find(' ');
        std::string_view value = rest.substr(0, end);
        ++field;
        if (field == 3 && !value.empty()) {
            fields.state = value.front();
        } else if (field == 22) {
            auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), fields.start_time);
            if (ec != std::errc() || ptr != value.data() + value.size()) {
                return make_error("/proc/{}/stat: start time '{}' is not a number", pid, value);
            }
            return fields;
        }
        if (end == std::string_view::npos) {
            break;
        }
        rest.remove_prefix(end);
    }
    return make_error("/proc/{}/stat has fewer than 22 fields", pid);
}

}  // namespace

Result<std::int64_t> process_start_time(pid_t pid) {
    auto fields = read_stat(pid);
    if (!fields) {
        return fields.error();
    }
    return fields->start_time;
}

bool is_same_process_alive(const VmmProcess& vmm) {
    if (vmm.pid <= 0) {
        return false;
    }
    auto fields = read_stat(static_cast<pid_t>(vmm.pid));
    return fields && fields->start_time == vmm.start_time && fields->state != 'Z' && fields->state != 'X';
}

}  // namespace sbx::sbxd

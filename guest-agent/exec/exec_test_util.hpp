// For exec's host-side tests: the real agent over socket pairs (see
// agent_test_util.hpp), the real client, and a few shortcuts.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/exec/exec_client.hpp"

namespace sbx::agent::testing {

struct ExecHarness : AgentHarness {
    // sbx-agent's main ignores SIGPIPE; so must a test process writing to
    // pipes and sockets whose readers go away.
    ExecHarness() { ::signal(SIGPIPE, SIG_IGN); }
};

inline ExecResult run_ok(AgentClient& client, ExecRequest request) {
    auto result = exec(client, request);
    REQUIRE_MESSAGE(result.has_value(), (result ? "" : result.error().to_string()));
    return std::move(*result);
}

inline ExecResult sh(AgentClient& client, std::string command) {
    ExecRequest request;
    request.shell = std::move(command);
    return run_ok(client, std::move(request));
}

template <typename Predicate>
bool eventually(Predicate done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
        if (done()) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done();
}

// Whether the pid is gone for good: reaped, not merely a zombie.
inline bool process_gone(int pid) {
    return ::kill(pid, 0) < 0 && errno == ESRCH;
}

// Zombies whose parent is this process (none may linger: all are reaped).
inline int zombie_children() {
    int zombies = 0;
    DIR* proc = ::opendir("/proc");
    REQUIRE(proc != nullptr);
    while (dirent* entry = ::readdir(proc)) {
        std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
        std::string line;
        if (!std::getline(stat, line)) {
            continue;
        }
        // pid (comm) state ppid ...: comm may hold spaces, so parse after ')'.
        auto close = line.rfind(')');
        if (close == std::string::npos || close + 4 >= line.size()) {
            continue;
        }
        char state = line[close + 2];
        int ppid = std::atoi(line.c_str() + close + 4);
        if (state == 'Z' && ppid == ::getpid()) {
            ++zombies;
        }
    }
    ::closedir(proc);
    return zombies;
}

inline std::string as_text(std::span<const std::uint8_t> bytes) {
    return std::string(bytes.begin(), bytes.end());
}

}  // namespace sbx::agent::testing

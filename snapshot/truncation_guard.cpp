#include "snapshot/truncation_guard.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace sbx::snapshot {
namespace {

constexpr std::size_t kMessageBytes = 512;

struct Guard {
    std::atomic<bool> used{false};
    std::atomic<std::uintptr_t> start{0};
    std::atomic<std::uintptr_t> end{0};  // 0: not armed yet
    std::array<char, kMessageBytes> message{};
    std::size_t message_length = 0;
};

// Process-wide by necessity: the SIGBUS handler can reach nothing else.
struct Table {
    std::array<Guard, TruncationGuard::kMaxGuards> guards;
    std::mutex install_mutex;  // installs and removes; the handler never locks
    bool handler_installed = false;
    struct sigaction previous{};
};

Table& table() {
    static Table t;
    return t;
}

void on_sigbus(int signo, siginfo_t* info, void* context) {
    const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (const Guard& g : table().guards) {
        const std::uintptr_t end = g.end.load(std::memory_order_acquire);
        if (end != 0 && address >= g.start.load(std::memory_order_relaxed) && address < end) {
            [[maybe_unused]] auto n = ::write(STDERR_FILENO, g.message.data(), g.message_length);
            ::_exit(TruncationGuard::kExitStatus);
        }
    }
    // Not ours: whoever handled SIGBUS before, else the default action
    // (returning re-raises the fault under it).
    const struct sigaction& previous = table().previous;
    if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
        previous.sa_sigaction(signo, info, context);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
        previous.sa_handler(signo);
        return;
    }
    ::signal(SIGBUS, SIG_DFL);
}

}  // namespace

Result<TruncationGuard> TruncationGuard::install(const void* start, std::size_t length,
                                                 const std::string& path) {
    Table& t = table();
    std::lock_guard lock(t.install_mutex);
    if (!t.handler_installed) {
        struct sigaction sa{};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (::sigaction(SIGBUS, &sa, &t.previous) != 0) {
            return sys_error("sigaction SIGBUS");
        }
        t.handler_installed = true;
    }
    for (std::size_t i = 0; i < t.guards.size(); ++i) {
        Guard& g = t.guards[i];
        if (g.used.load(std::memory_order_relaxed)) {
            continue;
        }
        g.used.store(true, std::memory_order_relaxed);
        const int n = std::snprintf(g.message.data(), g.message.size(),
                                    "sbx-vmm: error: exit: vmm-error: the snapshot file %s shrank under the "
                                    "running VM (SIGBUS reading guest memory mapped from it)\n",
                                    path.c_str());
        g.message_length = n < 0 ? 0 : std::min(static_cast<std::size_t>(n), g.message.size() - 1);
        const auto begin = reinterpret_cast<std::uintptr_t>(start);
        g.start.store(begin, std::memory_order_relaxed);
        g.end.store(begin + length, std::memory_order_release);
        return TruncationGuard(i);
    }
    return make_coded_error("limit", "more than {} guarded snapshot mappings", kMaxGuards);
}

TruncationGuard::~TruncationGuard() {
    if (slot_ == kNone) {
        return;
    }
    Table& t = table();
    std::lock_guard lock(t.install_mutex);
    Guard& g = t.guards[slot_];
    g.end.store(0, std::memory_order_release);
    g.start.store(0, std::memory_order_relaxed);
    g.used.store(false, std::memory_order_relaxed);
}

}  // namespace sbx::snapshot

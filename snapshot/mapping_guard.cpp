#include "snapshot/mapping_guard.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace sbx::snapshot {
namespace {

constexpr std::array<int, 2> kSignals{SIGBUS, SIGSEGV};  // by Fault

struct Guard {
    std::atomic<bool> used{false};
    std::atomic<int> signo{0};
    std::atomic<std::uintptr_t> start{0};
    std::atomic<std::uintptr_t> end{0};  // 0: not armed
    // Two buffers, so set_message never writes the one a handler may read.
    std::array<std::array<char, MappingGuard::kMaxMessage + 1>, 2> messages{};
    std::array<std::size_t, 2> lengths{};
    std::atomic<int> current{0};
};

// Process-wide by necessity: a signal handler can reach nothing else.
struct Table {
    std::array<Guard, MappingGuard::kMaxGuards> guards;
    std::mutex install_mutex;  // installs, messages and removals; never the handler
    std::array<bool, kSignals.size()> handler_installed{};
    std::array<struct sigaction, kSignals.size()> previous{};
};

Table& table() {
    static Table t;
    return t;
}

void on_fault(int signo, siginfo_t* info, void* context) {
    const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (const Guard& g : table().guards) {
        const std::uintptr_t end = g.end.load(std::memory_order_acquire);
        if (end != 0 && g.signo.load(std::memory_order_relaxed) == signo &&
            address >= g.start.load(std::memory_order_relaxed) && address < end) {
            const int m = g.current.load(std::memory_order_acquire);
            [[maybe_unused]] auto n = ::write(STDERR_FILENO, g.messages[m].data(), g.lengths[m]);
            ::_exit(MappingGuard::kExitStatus);
        }
    }
    // Not ours: whoever handled it before, else the default action
    // (returning re-raises the fault under it).
    const std::size_t which = signo == SIGBUS ? 0 : 1;
    const struct sigaction& previous = table().previous[which];
    if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
        previous.sa_sigaction(signo, info, context);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
        previous.sa_handler(signo);
        return;
    }
    ::signal(signo, SIG_DFL);
}

// Copies `message` and a newline into buffer `m` of `g` (install_mutex held).
void write_message(Guard& g, int m, std::string_view message) {
    const std::size_t n = std::min(message.size(), MappingGuard::kMaxMessage - 1);
    std::memcpy(g.messages[m].data(), message.data(), n);
    g.messages[m][n] = '\n';
    g.lengths[m] = n + 1;
}

}  // namespace

Result<MappingGuard> MappingGuard::install(Fault fault, const void* start, std::size_t length,
                                           std::string_view message) {
    const auto which = static_cast<std::size_t>(fault);
    const int signo = kSignals[which];
    Table& t = table();
    std::lock_guard lock(t.install_mutex);
    // Ours unless someone replaced it since (then it becomes the previous one).
    struct sigaction current{};
    if (t.handler_installed[which] && ::sigaction(signo, nullptr, &current) == 0 &&
        ((current.sa_flags & SA_SIGINFO) == 0 || current.sa_sigaction != on_fault)) {
        t.handler_installed[which] = false;
    }
    if (!t.handler_installed[which]) {
        struct sigaction sa{};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (::sigaction(signo, &sa, &t.previous[which]) != 0) {
            return sys_error("sigaction {}", sigabbrev_np(signo));
        }
        t.handler_installed[which] = true;
    }
    for (std::size_t i = 0; i < t.guards.size(); ++i) {
        Guard& g = t.guards[i];
        if (g.used.load(std::memory_order_relaxed)) {
            continue;
        }
        g.used.store(true, std::memory_order_relaxed);
        write_message(g, 0, message);
        g.current.store(0, std::memory_order_relaxed);
        g.signo.store(signo, std::memory_order_relaxed);
        const auto begin = reinterpret_cast<std::uintptr_t>(start);
        g.start.store(begin, std::memory_order_relaxed);
        g.end.store(begin + length, std::memory_order_release);
        return MappingGuard(i);
    }
    return make_coded_error("limit", "more than {} guarded guest memory mappings", kMaxGuards);
}

void MappingGuard::set_message(std::string_view message) {
    Table& t = table();
    std::lock_guard lock(t.install_mutex);
    Guard& g = t.guards[slot_];
    const int next = 1 - g.current.load(std::memory_order_relaxed);
    write_message(g, next, message);
    g.current.store(next, std::memory_order_release);
}

MappingGuard::~MappingGuard() {
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

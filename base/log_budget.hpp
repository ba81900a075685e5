// A bound on the log lines something outside the VMM's control can cause
// (a guest's register writes, say): the first `burst` pass, then at most
// one per `interval`, each told how many were held back before it. A guest
// that repeats a mistake a million times a second fills no disk.
#pragma once

#include <chrono>
#include <cstdint>

namespace sbx {

class LogBudget {
public:
    using Clock = std::chrono::steady_clock;
    explicit LogBudget(unsigned burst = 8, Clock::duration interval = std::chrono::seconds(60))
        : burst_(burst), interval_(interval) {}

    // Whether a line may be logged at `now`; when it may, `held_back` is
    // how many were refused since the last one that was.
    [[nodiscard]] bool take(std::uint64_t& held_back, Clock::time_point now = Clock::now());

private:
    unsigned burst_;
    Clock::duration interval_;
    unsigned spent_ = 0;
    Clock::time_point last_{};
    std::uint64_t held_back_ = 0;
};

}  // namespace sbx

// What the agent keeps for the freeze and thaw ops: the kernel calls, one
// op at a time, and the thaw that runs by itself when the host does not
// come back (docs/agent-protocol.md, "freeze, thaw"): a host that died
// between freeze and snapshot must not leave the guest's disks frozen.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include "guest-agent/freeze/freeze_kernel.hpp"

namespace sbx::agent {

class FreezeState {
public:
    using Clock = std::chrono::steady_clock;
    explicit FreezeState(std::shared_ptr<FreezeKernel> kernel);
    ~FreezeState();  // the watchdog ends; a frozen file system stays so
    FreezeState(const FreezeState&) = delete;
    FreezeState& operator=(const FreezeState&) = delete;

    [[nodiscard]] FreezeKernel& kernel() { return *kernel_; }
    // Held by each freeze and thaw op (and the watchdog's thaw).
    [[nodiscard]] std::mutex& mutex() { return op_mutex_; }
    // thaw_all() at `deadline` unless disarmed first. Callers hold mutex().
    void arm(Clock::time_point deadline);
    void disarm();
    // How many times the watchdog thawed (for tests and health).
    [[nodiscard]] unsigned watchdog_thaws() const;

private:
    void watch(const std::stop_token& stop);

    std::shared_ptr<FreezeKernel> kernel_;
    std::mutex op_mutex_;
    mutable std::mutex mutex_;  // deadline_ and thaws_
    std::condition_variable_any changed_;
    std::optional<Clock::time_point> deadline_;
    unsigned thaws_ = 0;
    std::jthread watchdog_;  // last: started after the rest, stopped first
};

}  // namespace sbx::agent

// The run state of each of a VM's vCPU threads, and pause, resume and stop
// across them:
//
//     Running --pause--> Parked --resume--> Running
//        |                 |
//        +------stop-------+----> Exited  (or the thread ends by itself)
//
// A vCPU thread parks only after a kick made KVM_RUN return EINTR: any I/O
// exit before that has been completed by that KVM_RUN (api.rst 5,
// "kvm_run", immediate_exit), so a paused machine's state is consistent.
// No KVM here: the thread's loop is the caller's (Vm::vcpu_loop), which
// makes the states testable with plain threads (vcpu_run_states_test.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <vector>

#include "base/result.hpp"

namespace sbx {

class VcpuRunStates {
public:
    enum class State { Running, Parked, Exited };

    explicit VcpuRunStates(std::size_t count) : states_(count, State::Running) {}

    // --- a vCPU thread's side.
    // Read after every exit, lock-free.
    [[nodiscard]] bool pause_requested() const { return pause_requested_.load(); }
    [[nodiscard]] bool stopping() const { return stopping_.load(); }
    // Parks vCPU `id` until resume() (true: run on) or stop() (false: leave).
    bool park(std::size_t id);
    // The thread leaves its loop for good.
    void exited(std::size_t id);

    // --- the controller's side, one call at a time.
    // Asks every vCPU to park, calls `kick` to get them out of KVM_RUN and
    // waits until none is Running. Errors: vm_not_running (stopping),
    // pause_timeout (a vCPU did not park within `timeout`; the request is
    // withdrawn and the parked ones run on).
    [[nodiscard]] Result<void> pause(const std::function<void()>& kick, std::chrono::milliseconds timeout);
    // Parked vCPUs run on.
    void resume();
    // Every vCPU leaves: parked ones at once, running ones at their next
    // exit (the caller kicks them).
    void stop();

    [[nodiscard]] State state(std::size_t id) const;
    [[nodiscard]] std::size_t size() const { return states_.size(); }

private:
    [[nodiscard]] bool none_running() const;

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<State> states_;
    std::atomic<bool> pause_requested_{false};
    std::atomic<bool> stopping_{false};
};

}  // namespace sbx

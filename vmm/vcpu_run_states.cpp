#include "vmm/vcpu_run_states.hpp"

#include <algorithm>

namespace sbx {

bool VcpuRunStates::park(std::size_t id) {
    std::unique_lock lock(mutex_);
    states_[id] = State::Parked;
    changed_.notify_all();
    changed_.wait(lock, [this] { return !pause_requested_ || stopping_; });
    if (stopping_) {
        return false;
    }
    states_[id] = State::Running;
    return true;
}

void VcpuRunStates::exited(std::size_t id) {
    {
        std::lock_guard lock(mutex_);
        states_[id] = State::Exited;
    }
    changed_.notify_all();
}

bool VcpuRunStates::none_running() const {
    return std::none_of(states_.begin(), states_.end(), [](State s) { return s == State::Running; });
}

Result<void> VcpuRunStates::pause(const std::function<void()>& kick, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (stopping_) {
        return make_coded_error("vm_not_running", "the VM is exiting");
    }
    pause_requested_ = true;
    kick();
    bool settled = changed_.wait_for(lock, timeout, [this] { return stopping_ || none_running(); });
    if (!stopping_ && settled) {
        return ok();
    }
    pause_requested_ = false;
    changed_.notify_all();
    if (stopping_) {
        return make_coded_error("vm_not_running", "the VM exited while pausing");
    }
    return make_coded_error("pause_timeout", "a vCPU did not stop within {} ms", timeout.count());
}

void VcpuRunStates::resume() {
    {
        std::lock_guard lock(mutex_);
        pause_requested_ = false;
    }
    changed_.notify_all();
}

void VcpuRunStates::stop() {
    {
        // Under the lock: a vCPU between its predicate check and its wait
        // cannot miss the wake-up.
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
}

VcpuRunStates::State VcpuRunStates::state(std::size_t id) const {
    std::lock_guard lock(mutex_);
    return states_[id];
}

}  // namespace sbx

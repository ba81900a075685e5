#include "vmm/vm_exit.hpp"

namespace sbx {

int exit_code(ExitReason reason) {
    switch (reason) {
        case ExitReason::Reboot:
        case ExitReason::PowerOff:
        case ExitReason::Stopped: return 0;
        case ExitReason::TripleFault: return 2;
        case ExitReason::KvmError: return 3;
        case ExitReason::VmmError: return 4;
        case ExitReason::Panic: return 5;
    }
    return 4;
}

const char* to_string(ExitReason reason) {
    switch (reason) {
        case ExitReason::Reboot: return "reboot";
        case ExitReason::PowerOff: return "poweroff";
        case ExitReason::Panic: return "panic";
        case ExitReason::TripleFault: return "triple-fault";
        case ExitReason::KvmError: return "kvm-error";
        case ExitReason::VmmError: return "vmm-error";
        case ExitReason::Stopped: return "stopped";
    }
    return "unknown";
}

Result<std::unique_ptr<ExitLatch>> ExitLatch::create() {
    auto event = EventFd::create();
    if (!event) {
        return event.error();
    }
    return std::unique_ptr<ExitLatch>(new ExitLatch(std::move(*event)));
}

void ExitLatch::request(VmExit exit) {
    {
        std::lock_guard lock(mutex_);
        if (exit_) {
            return;
        }
        exit_ = std::move(exit);
        requested_ = true;
    }
    [[maybe_unused]] auto r = event_.signal();
}

std::optional<VmExit> ExitLatch::exit() const {
    std::lock_guard lock(mutex_);
    return exit_;
}

}  // namespace sbx

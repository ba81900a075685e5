// Why a VM stopped running, and the latch every exit request goes through:
// a device (i8042 reset, pvpanic), a vCPU (triple fault, a KVM error), the
// embedder or a signal. The first request wins; each signals the run loop.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/event_fd.hpp"
#include "base/result.hpp"

namespace sbx {

enum class ExitReason {
    Reboot,       // guest reboot (i8042 reset line): a clean exit
    PowerOff,     // guest poweroff (pvpanic SHUTDOWN, or a KVM system event)
    Panic,        // guest kernel panic (pvpanic PANICKED)
    TripleFault,  // KVM_EXIT_SHUTDOWN
    KvmError,     // internal error, failed entry, unhandled exit
    VmmError,     // the VMM itself failed (an ioctl, a thread)
    Stopped,      // stopped by the embedder through request_stop()
};

struct VmExit {
    ExitReason reason;
    std::string message;
};

// The sbx-vmm process exit status for a reason: 0 for a clean guest exit.
[[nodiscard]] int exit_code(ExitReason reason);
[[nodiscard]] const char* to_string(ExitReason reason);

class ExitLatch {
public:
    static Result<std::unique_ptr<ExitLatch>> create();

    // Thread-safe and non-blocking (device callbacks run under device locks).
    void request(VmExit exit);
    // Lock-free: read by every vCPU after every exit.
    [[nodiscard]] bool requested() const { return requested_.load(); }
    [[nodiscard]] std::optional<VmExit> exit() const;
    // Readable once an exit was requested.
    [[nodiscard]] int fd() const { return event_.fd(); }

private:
    explicit ExitLatch(EventFd event) : event_(std::move(event)) {}

    EventFd event_;
    mutable std::mutex mutex_;
    std::optional<VmExit> exit_;
    std::atomic<bool> requested_{false};
};

}  // namespace sbx

// SIGTERM, SIGINT and SIGHUP as requests to stop the VM in order (vCPUs,
// then devices and their I/O in flight), not as the default sudden death.
// Construct before any thread exists: the signals are blocked in the
// constructing thread, so every thread created later inherits the mask and
// only the watcher thread takes them (sigtimedwait(2)).
#pragma once

#include <atomic>
#include <csignal>
#include <functional>
#include <thread>

#include "base/thread_class.hpp"

namespace sbx {

class StopSignals {
public:
    StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;
    ~StopSignals();

    // Calls `on_signal(signo)` on the watcher thread for each signal taken,
    // including one that arrived before start(). Once. `hook` runs first on
    // the watcher thread (base/thread_class.hpp).
    void start(std::function<void(int)> on_signal, const ThreadStartHook& hook = {});
    // Ends and joins the watcher; signals arriving later stay pending and
    // blocked (the process is about to exit).
    void stop();

private:
    sigset_t set_{};
    std::atomic<bool> stopping_{false};
    std::thread watcher_;
};

}  // namespace sbx

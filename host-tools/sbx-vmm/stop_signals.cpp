#include "host-tools/sbx-vmm/stop_signals.hpp"

#include <pthread.h>

#include <cerrno>
#include <ctime>

namespace sbx {

StopSignals::StopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGHUP);
    ::pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

StopSignals::~StopSignals() {
    stop();
}

void StopSignals::start(std::function<void(int)> on_signal, const ThreadStartHook& hook) {
    watcher_ = std::thread([this, on_signal = std::move(on_signal), hook] {
        start_thread_as(ThreadClass::Signals, 0, hook);
        // A short timeout so that stop() is seen; a signal is taken at once.
        const timespec slice{0, 100'000'000};
        while (!stopping_) {
            siginfo_t info{};
            const int signo = ::sigtimedwait(&set_, &info, &slice);
            if (signo > 0) {
                on_signal(signo);
            }
        }
    });
}

void StopSignals::stop() {
    stopping_ = true;
    if (watcher_.joinable()) {
        watcher_.join();
    }
}

}  // namespace sbx

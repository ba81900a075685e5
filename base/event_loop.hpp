// A dispatching epoll loop for one thread: fds are registered with a
// handler, run() calls the handlers of ready fds until stop(). add, modify
// and remove may be called from any thread, including from inside a handler.
// Each registration has its own token, so an event still queued for a
// removed fd never reaches a handler registered later on the same fd number.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "base/epoll.hpp"
#include "base/event_fd.hpp"
#include "base/result.hpp"

namespace sbx {

class EventLoop {
public:
    using Handler = std::function<void(std::uint32_t events)>;

    static Result<std::unique_ptr<EventLoop>> create();

    Result<void> add(int fd, std::uint32_t events, Handler handler);
    Result<void> modify(int fd, std::uint32_t events);
    // Stops delivering events for fd; a handler already running finishes.
    void remove(int fd);

    // Dispatches until stop(); an error from epoll_wait ends it. The loop
    // may be run again after it returns.
    Result<void> run();
    // One wait of up to timeout_ms (-1: forever) and its dispatch; returns
    // how many handlers ran. For tests and for loops embedded elsewhere.
    Result<std::size_t> run_once(int timeout_ms);
    // Thread-safe; run() returns after the handlers it is calling now (or
    // at once, if it is called after this).
    void stop();

private:
    struct Registration {
        std::uint64_t token;
        std::shared_ptr<Handler> handler;
    };
    EventLoop(Epoll epoll, EventFd wake) : epoll_(std::move(epoll)), wake_(std::move(wake)) {}

    Epoll epoll_;
    EventFd wake_;
    std::atomic<bool> stopping_{false};
    std::mutex mutex_;
    std::uint64_t next_token_ = 1;  // 0 is the wake eventfd
    std::unordered_map<int, Registration> by_fd_;
    std::unordered_map<std::uint64_t, std::shared_ptr<Handler>> by_token_;
};

}  // namespace sbx

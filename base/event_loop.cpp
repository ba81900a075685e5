#include "base/event_loop.hpp"

#include <sys/epoll.h>

#include <array>

namespace sbx {

Result<std::unique_ptr<EventLoop>> EventLoop::create() {
    auto epoll = Epoll::create();
    if (!epoll) {
        return epoll.error();
    }
    auto wake = EventFd::create();
    if (!wake) {
        return wake.error();
    }
    if (auto r = epoll->add(wake->fd(), EPOLLIN, 0); !r) {
        return r.error();
    }
    return std::unique_ptr<EventLoop>(new EventLoop(std::move(*epoll), std::move(*wake)));
}

Result<void> EventLoop::add(int fd, std::uint32_t events, Handler handler) {
    std::lock_guard lock(mutex_);
    if (by_fd_.contains(fd)) {
        return make_error("event loop: fd {} is already registered", fd);
    }
    std::uint64_t token = next_token_++;
    if (auto r = epoll_.add(fd, events, token); !r) {
        return r.error();
    }
    auto shared = std::make_shared<Handler>(std::move(handler));
    by_fd_.emplace(fd, Registration{token, shared});
    by_token_.emplace(token, std::move(shared));
    return ok();
}

Result<void> EventLoop::modify(int fd, std::uint32_t events) {
    std::lock_guard lock(mutex_);
    auto it = by_fd_.find(fd);
    if (it == by_fd_.end()) {
        return make_error("event loop: fd {} is not registered", fd);
    }
    return epoll_.modify(fd, events, it->second.token);
}

void EventLoop::remove(int fd) {
    std::lock_guard lock(mutex_);
    auto it = by_fd_.find(fd);
    if (it == by_fd_.end()) {
        return;
    }
    [[maybe_unused]] auto r = epoll_.remove(fd);
    by_token_.erase(it->second.token);
    by_fd_.erase(it);
}

Result<void> EventLoop::run() {
    while (!stopping_) {
        if (auto n = run_once(-1); !n) {
            stopping_ = false;
            return n.error();
        }
    }
    // One stop() ends one run(): a paused VM runs its device loop again.
    stopping_ = false;
    return ok();
}

Result<std::size_t> EventLoop::run_once(int timeout_ms) {
    std::array<Epoll::Event, 32> events{};
    auto n = epoll_.wait(events, timeout_ms);
    if (!n) {
        return n.error();
    }
    std::size_t ran = 0;
    for (std::size_t i = 0; i < *n && !stopping_; ++i) {
        if (events[i].token == 0) {
            [[maybe_unused]] auto r = wake_.consume();
            continue;
        }
        std::shared_ptr<Handler> handler;
        {
            std::lock_guard lock(mutex_);
            auto it = by_token_.find(events[i].token);
            if (it == by_token_.end()) {
                continue;  // removed after epoll_wait returned
            }
            handler = it->second;
        }
        (*handler)(events[i].events);
        ++ran;
    }
    return ran;
}

void EventLoop::stop() {
    stopping_ = true;
    [[maybe_unused]] auto r = wake_.signal();
}

}  // namespace sbx

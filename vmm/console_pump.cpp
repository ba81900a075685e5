#include "vmm/console_pump.hpp"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "base/epoll.hpp"

namespace sbx {

namespace {

constexpr std::size_t kMaxPendingInput = 4096;
constexpr long kRetryNs = 10'000'000;  // 10 ms

}  // namespace

Result<std::unique_ptr<ConsolePump>> ConsolePump::create(Console console) {
    auto ready = EventFd::create();
    if (!ready) {
        return ready.error();
    }
    int timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer < 0) {
        return sys_error("timerfd_create");
    }
    return std::unique_ptr<ConsolePump>(new ConsolePump(std::move(console), std::move(*ready), UniqueFd(timer)));
}

void ConsolePump::output_ready() const { [[maybe_unused]] auto r = ready_.signal(); }

Result<void> ConsolePump::attach(Serial& serial, EventLoop& loop) {
    serial_ = &serial;
    loop_ = &loop;
    auto added = loop.add(ready_.fd(), EPOLLIN, [this](std::uint32_t) {
        [[maybe_unused]] auto r = ready_.consume();
        update_watches();
    });
    if (added) {
        added = loop.add(retry_timer_.get(), EPOLLIN, [this](std::uint32_t) {
            std::uint64_t ticks = 0;
            [[maybe_unused]] auto n = ::read(retry_timer_.get(), &ticks, sizeof ticks);
            offer_input();
            update_watches();
        });
    }
    if (!added) {
        return added.error().context("console");
    }
    input_open_ = console_.input_fd() >= 0;
    // Output the UART took before the loop ran goes out now.
    update_watches();
    return ok();
}

bool ConsolePump::pump_output() {
    if (pending_out_.empty()) {
        serial_->take_output(pending_out_);
    }
    while (!pending_out_.empty()) {
        std::size_t written = console_.write_some(pending_out_);
        pending_out_.erase(0, written);
        if (!pending_out_.empty()) {
            return true;  // the reader is full
        }
        serial_->take_output(pending_out_);
    }
    return false;
}

void ConsolePump::read_input() {
    std::array<char, 512> buf{};
    ssize_t got = ::read(console_.input_fd(), buf.data(), buf.size());
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    if (got <= 0) {  // EOF or a real error: no more input for the guest
        input_open_ = false;
        return;
    }
    pending_in_.append(buf.data(), static_cast<std::size_t>(got));
    offer_input();
}

void ConsolePump::offer_input() {
    if (pending_in_.empty()) {
        return;
    }
    auto taken = serial_->enqueue_input(
        std::span(reinterpret_cast<const std::uint8_t*>(pending_in_.data()), pending_in_.size()));
    pending_in_.erase(0, taken);
}

// Watches exactly what is needed: input while there is room for it, the
// reader's EPOLLOUT while output waits, the retry timer while input waits.
void ConsolePump::update_watches() {
    std::map<int, std::uint32_t> want;
    if (pump_output() && console_.pollable_output_fd() >= 0) {
        want[console_.pollable_output_fd()] |= EPOLLOUT;
    }
    const int in_fd = console_.input_fd();
    if (input_open_ && pending_in_.size() < kMaxPendingInput) {
        want[in_fd] |= EPOLLIN;
    }
    for (auto it = watched_.begin(); it != watched_.end();) {
        if (want.count(it->first) == 0) {
            loop_->remove(it->first);
            it = watched_.erase(it);
        } else {
            ++it;
        }
    }
    for (const auto& [want_fd, want_events] : want) {
        const int fd = want_fd;  // clang 14 cannot capture a structured binding (P1381, clang 16)
        const std::uint32_t events = want_events;
        auto found = watched_.find(fd);
        if (found == watched_.end()) {
            auto added = loop_->add(fd, events, [this, fd, in_fd](std::uint32_t ready) {
                if (fd == in_fd && input_open_ && (ready & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
                    read_input();
                }
                update_watches();
            });
            if (added) {
                watched_[fd] = events;
            } else if (fd == in_fd) {
                input_open_ = false;  // not pollable (a regular file): no console input
            }
        } else if (found->second != events) {
            if (loop_->modify(fd, events)) {
                found->second = events;
            }
        }
    }
    bool want_retry = !pending_in_.empty();
    if (want_retry != retry_armed_) {
        retry_armed_ = want_retry;
        itimerspec spec{};
        if (want_retry) {
            spec.it_value.tv_nsec = kRetryNs;
            spec.it_interval.tv_nsec = kRetryNs;
        }
        ::timerfd_settime(retry_timer_.get(), 0, &spec, nullptr);
    }
}

void ConsolePump::drain(std::chrono::milliseconds limit) {
    if (serial_ == nullptr) {
        return;
    }
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (pump_output() && std::chrono::steady_clock::now() < deadline) {
        int fd = console_.pollable_output_fd();
        if (fd < 0) {
            break;
        }
        auto epoll = Epoll::create();
        Epoll::Event ev[1];
        if (!epoll || !epoll->add(fd, EPOLLOUT, 0) || !epoll->wait(ev, 100)) {
            break;
        }
    }
}

}  // namespace sbx

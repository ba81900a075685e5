// The listening half of a forward: a bounded set of threads, one per
// accepted connection, joined before their owner goes away (no detached
// thread outlives it), and the accept loop that feeds it.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "base/unique_fd.hpp"

namespace sbx::agent {

class ConnectionThreads {
public:
    explicit ConnectionThreads(std::size_t limit) : limit_(limit) {}
    ~ConnectionThreads() { join_all(); }
    ConnectionThreads(const ConnectionThreads&) = delete;
    ConnectionThreads& operator=(const ConnectionThreads&) = delete;

    // Runs `work` (a callable, may be move-only) on a new thread; false
    // (and `work` not run) at the limit or when no thread can be created.
    template <typename Work>
    [[nodiscard]] bool start(Work&& work) {
        std::lock_guard lock(mutex_);
        reap();
        if (threads_.size() >= limit_) {
            return false;
        }
        auto& entry = threads_.emplace_back(Entry{{}, std::make_shared<std::atomic<bool>>(false)});
        try {
            entry.thread = std::thread([work = std::forward<Work>(work), done = entry.done]() mutable {
                work();
                done->store(true);
            });
        } catch (const std::system_error&) {  // EAGAIN: out of threads
            threads_.pop_back();
            return false;
        }
        return true;
    }
    // Threads still running.
    [[nodiscard]] std::size_t running();
    // Waits for every thread.
    void join_all();

private:
    struct Entry {
        std::thread thread;
        std::shared_ptr<std::atomic<bool>> done;
    };
    // Joins the threads that finished (under mutex_).
    void reap();

    std::size_t limit_;
    std::mutex mutex_;
    std::list<Entry> threads_;
};

// True when a connection that should stay silent was closed or failed;
// bytes it sends anyway are read and dropped.
[[nodiscard]] bool silent_connection_closed(int fd);

// Accepts connections on `listener` and runs `serve(UniqueFd)` for each on
// a thread of `threads` (at the limit a connection is closed at once),
// until `stop_fd` becomes readable or `watched` (a connection that must
// stay open, e.g. the agent connection holding a listener) closes; -1
// for either: none.
template <typename Serve>
void accept_connections(int listener, int stop_fd, int watched, ConnectionThreads& threads, Serve& serve) {
    while (true) {
        pollfd fds[3] = {{stop_fd, POLLIN, 0}, {watched, POLLIN, 0}, {listener, POLLIN, 0}};
        if (::poll(fds, 3, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        if (fds[0].revents != 0 || (fds[1].revents != 0 && silent_connection_closed(watched))) {
            return;
        }
        if (fds[2].revents == 0) {
            continue;
        }
        UniqueFd connection(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
        if (!connection) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                // The connection stays pending and the listener readable: back off.
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            continue;
        }
        [[maybe_unused]] bool started = threads.start(
            [connection = std::move(connection), &serve]() mutable { serve(std::move(connection)); });
    }
}

}  // namespace sbx::agent

#include "guest-agent/forward/connection_threads.hpp"

namespace sbx::agent {

bool silent_connection_closed(int fd) {
    char sink[512];
    ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

void ConnectionThreads::reap() {
    for (auto it = threads_.begin(); it != threads_.end();) {
        if (it->done->load()) {
            it->thread.join();
            it = threads_.erase(it);
        } else {
            ++it;
        }
    }
}

std::size_t ConnectionThreads::running() {
    std::lock_guard lock(mutex_);
    reap();
    return threads_.size();
}

void ConnectionThreads::join_all() {
    std::list<Entry> all;
    {
        std::lock_guard lock(mutex_);
        all.swap(threads_);
    }
    for (Entry& entry : all) {
        entry.thread.join();
    }
}

}  // namespace sbx::agent

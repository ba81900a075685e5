// RAII epoll(7) instance with a fixed-size wait.
#pragma once

#include <cstdint>
#include <span>

#include "base/unique_fd.hpp"

namespace sbx {

class Epoll {
public:
    struct Event {
        std::uint64_t token;  // what the caller registered the fd with
        std::uint32_t events;  // EPOLLIN, EPOLLHUP, ...
    };

    static Result<Epoll> create();

    Result<void> add(int fd, std::uint32_t events, std::uint64_t token) const;
    Result<void> modify(int fd, std::uint32_t events, std::uint64_t token) const;
    Result<void> remove(int fd) const;
    // Waits up to timeout_ms (-1: forever); returns how many of out were filled.
    Result<std::size_t> wait(std::span<Event> out, int timeout_ms) const;

private:
    explicit Epoll(UniqueFd fd) : fd_(std::move(fd)) {}
    UniqueFd fd_;
};

}  // namespace sbx

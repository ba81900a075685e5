// RAII eventfd(2): a counter the kernel and threads can signal.
#pragma once

#include <cstdint>

#include "base/unique_fd.hpp"

namespace sbx {

class EventFd {
public:
    static Result<EventFd> create(bool nonblocking = true);

    [[nodiscard]] int fd() const { return fd_.get(); }
    Result<void> signal(std::uint64_t value = 1) const;
    // Reads and resets the counter; 0 when nonblocking and nothing was signalled.
    Result<std::uint64_t> consume() const;

private:
    explicit EventFd(UniqueFd fd) : fd_(std::move(fd)) {}
    UniqueFd fd_;
};

}  // namespace sbx

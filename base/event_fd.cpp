#include "base/event_fd.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

namespace sbx {

Result<EventFd> EventFd::create(bool nonblocking) {
    int flags = EFD_CLOEXEC | (nonblocking ? EFD_NONBLOCK : 0);
    int fd = ::eventfd(0, flags);
    if (fd < 0) {
        return sys_error("eventfd");
    }
    return EventFd(UniqueFd(fd));
}

Result<void> EventFd::signal(std::uint64_t value) const {
    if (::write(fd_.get(), &value, sizeof value) != sizeof value) {
        return sys_error("eventfd write");
    }
    return ok();
}

Result<std::uint64_t> EventFd::consume() const {
    std::uint64_t value = 0;
    if (::read(fd_.get(), &value, sizeof value) != sizeof value) {
        if (errno == EAGAIN) {
            return std::uint64_t{0};
        }
        return sys_error("eventfd read");
    }
    return value;
}

}  // namespace sbx

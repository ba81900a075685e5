#include "base/epoll.hpp"

#include <sys/epoll.h>

#include <array>

namespace sbx {

Result<Epoll> Epoll::create() {
    int fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) {
        return sys_error("epoll_create1");
    }
    return Epoll(UniqueFd(fd));
}

Result<void> Epoll::add(int fd, std::uint32_t events, std::uint64_t token) const {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token;
    if (::epoll_ctl(fd_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) {
        return sys_error("epoll add fd {}", fd);
    }
    return ok();
}

Result<void> Epoll::modify(int fd, std::uint32_t events, std::uint64_t token) const {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token;
    if (::epoll_ctl(fd_.get(), EPOLL_CTL_MOD, fd, &ev) < 0) {
        return sys_error("epoll modify fd {}", fd);
    }
    return ok();
}

Result<void> Epoll::remove(int fd) const {
    if (::epoll_ctl(fd_.get(), EPOLL_CTL_DEL, fd, nullptr) < 0) {
        return sys_error("epoll remove fd {}", fd);
    }
    return ok();
}

Result<std::size_t> Epoll::wait(std::span<Event> out, int timeout_ms) const {
    constexpr std::size_t kMax = 16;
    std::array<epoll_event, kMax> raw{};
    int max = static_cast<int>(std::min(out.size(), kMax));
    int n = ::epoll_wait(fd_.get(), raw.data(), max, timeout_ms);
    if (n < 0) {
        if (errno == EINTR) {
            return std::size_t{0};
        }
        return sys_error("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
        out[static_cast<std::size_t>(i)] = Event{raw[static_cast<std::size_t>(i)].data.u64,
                                                 raw[static_cast<std::size_t>(i)].events};
    }
    return static_cast<std::size_t>(n);
}

}  // namespace sbx

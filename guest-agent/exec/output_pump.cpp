#include "guest-agent/exec/output_pump.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>

namespace sbx::agent {
namespace {

constexpr std::size_t kReadChunk = std::size_t{128} * 1024;

struct Source {
    UniqueFd* fd;
    Channel channel;
};

// One read; closes the source at EOF (EIO: a terminal whose last user is gone).
void read_once(Source& source, std::uint8_t* buffer, std::size_t size,
               const std::function<void(Channel, std::span<const std::uint8_t>)>& sink) {
    ssize_t n = ::read(source.fd->get(), buffer, size);
    if (n > 0) {
        sink(source.channel, std::span<const std::uint8_t>(buffer, static_cast<std::size_t>(n)));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        source.fd->reset();
    }
}

// What the process wrote before it exited is in the pipe now: read exactly
// that much, so a chatty background writer cannot keep this going.
void drain_what_is_there(Source& source, std::uint8_t* buffer,
                         const std::function<void(Channel, std::span<const std::uint8_t>)>& sink) {
    int available = 0;
    if (::ioctl(source.fd->get(), FIONREAD, &available) < 0) {
        return;
    }
    auto left = static_cast<std::size_t>(available);
    while (left > 0 && *source.fd) {
        ssize_t n = ::read(source.fd->get(), buffer, std::min(left, kReadChunk));
        if (n <= 0) {
            if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                source.fd->reset();
            }
            return;
        }
        sink(source.channel, std::span<const std::uint8_t>(buffer, static_cast<std::size_t>(n)));
        left -= std::min(left, static_cast<std::size_t>(n));
    }
}

}  // namespace

void pump_output(SpawnedProcess& process,
                 const std::function<void(Channel, std::span<const std::uint8_t>)>& sink) {
    // Uninitialised on purpose: only what reads fill is ever touched.
    std::unique_ptr<std::uint8_t[]> buffer(new std::uint8_t[kReadChunk]);
    Source sources[2] = {{&process.out, Channel::Stdout}, {&process.err, Channel::Stderr}};
    std::optional<std::chrono::steady_clock::time_point> deadline;  // set once the process has exited

    while (*sources[0].fd || *sources[1].fd) {
        pollfd fds[3];
        Source* polled[3] = {};
        nfds_t count = 0;
        for (auto& source : sources) {
            if (*source.fd) {
                polled[count] = &source;
                fds[count++] = pollfd{source.fd->get(), POLLIN, 0};
            }
        }
        const nfds_t exit_slot = count;
        if (!deadline) {
            fds[count++] = pollfd{process.child->exited_fd(), POLLIN, 0};
        }
        int timeout = -1;
        if (deadline) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                *deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                break;
            }
            timeout = static_cast<int>(left.count()) + 1;
        }
        int n = ::poll(fds, count, timeout);
        if (n < 0 && errno != EINTR) {
            break;
        }
        if (n <= 0) {
            continue;
        }
        for (nfds_t i = 0; i < exit_slot; ++i) {
            if (fds[i].revents != 0) {
                read_once(*polled[i], buffer.get(), kReadChunk, sink);
            }
        }
        if (!deadline && (fds[exit_slot].revents & POLLIN) != 0) {
            for (auto& source : sources) {
                if (*source.fd) {
                    drain_what_is_there(source, buffer.get(), sink);
                }
            }
            deadline = std::chrono::steady_clock::now() + kExitGrace;
        }
    }
    process.out.reset();
    process.err.reset();
}

}  // namespace sbx::agent

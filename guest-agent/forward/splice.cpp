#include "guest-agent/forward/splice.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "base/unique_fd.hpp"

namespace sbx::agent {
namespace {

// One direction, from -> to. Bytes move through a pipe with splice(2)
// (the kernel hands pages along, no copy through this process); where a
// socket type cannot splice (EINVAL) they go through a buffer instead.
class Pump {
public:
    Pump(int from, int to, std::vector<std::uint8_t> first, bool zero_copy, const char* name)
        : from_(from), to_(to), first_(std::move(first)), name_(name) {
        int fds[2];
        if (zero_copy && ::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
            pipe_read_.reset(fds[0]);
            pipe_write_.reset(fds[1]);
            const int size = ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(kSpliceBuffer));
            capacity_ = size > 0 ? static_cast<std::size_t>(size) : 0;
        }
        if (capacity_ == 0) {  // e.g. EMFILE: 2 more fds per direction are a lot in a busy agent
            use_buffer();
        }
    }

    [[nodiscard]] bool wants_read() const { return !eof_ && !pipe_full_ && room() > 0; }
    [[nodiscard]] bool wants_write() const { return first_sent_ < first_.size() || held_ > 0; }
    [[nodiscard]] bool done() const { return write_shut_; }
    [[nodiscard]] int from() const { return from_; }
    [[nodiscard]] int to() const { return to_; }
    [[nodiscard]] std::uint64_t moved() const { return moved_; }

    // Moves what it can without blocking: read if `readable`, write if
    // `writable` (or right after a read: the far side is usually ready).
    Result<void> run(bool readable, bool writable) {
        if (readable && wants_read()) {
            ssize_t n = read();
            if (n > 0) {
                held_ += static_cast<std::size_t>(n);
                writable = true;
            } else if (n == 0) {
                eof_ = true;
            } else if (errno == EAGAIN && pipe_read_ && held_ > 0) {
                // Readable, yet nothing moved: the pipe ran out of slots
                // (one per socket buffer, however small). Wait for a write.
                pipe_full_ = true;
            } else if (errno != EAGAIN && errno != EINTR) {
                return sys_error("{}: reading", name_);
            }
        }
        while (writable && wants_write()) {
            ssize_t n = write();
            if (n <= 0) {
                if (n < 0 && errno != EAGAIN && errno != EINTR) {
                    return sys_error("{}: writing", name_);
                }
                break;
            }
            moved_ += static_cast<std::uint64_t>(n);
        }
        if (eof_ && !wants_write() && !write_shut_) {
            // The far reader sees end of stream; ENOTCONN: it is gone already.
            if (::shutdown(to_, SHUT_WR) < 0 && errno != ENOTCONN) {
                return sys_error("{}: passing on the end of stream", name_);
            }
            write_shut_ = true;
        }
        return ok();
    }

private:
    void use_buffer() {
        pipe_read_.reset();
        pipe_write_.reset();
        buffer_.resize(kSpliceBuffer);
        capacity_ = buffer_.size();
    }

    [[nodiscard]] std::size_t room() const { return capacity_ - buffer_head_ - held_; }

    ssize_t read() {
        if (pipe_write_) {
            ssize_t n = ::splice(from_, nullptr, pipe_write_.get(), nullptr, room(), SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n >= 0 || errno != EINVAL || held_ > 0) {
                return n;
            }
            use_buffer();  // this socket type does not splice
        }
        return ::recv(from_, buffer_.data() + buffer_head_ + held_, room(), MSG_DONTWAIT);
    }

    // One write: first the bytes handed over, then the pipe or buffer.
    ssize_t write() {
        if (first_sent_ < first_.size()) {
            ssize_t n = ::send(to_, first_.data() + first_sent_, first_.size() - first_sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                first_sent_ += static_cast<std::size_t>(n);
            }
            return n;
        }
        ssize_t n = 0;
        if (pipe_read_) {
            n = ::splice(pipe_read_.get(), nullptr, to_, nullptr, held_, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        } else {
            n = ::send(to_, buffer_.data() + buffer_head_, held_, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                buffer_head_ += static_cast<std::size_t>(n);
            }
        }
        if (n > 0) {
            held_ -= static_cast<std::size_t>(n);
            pipe_full_ = false;
            if (held_ == 0) {
                buffer_head_ = 0;
            }
        }
        return n;
    }

    int from_;
    int to_;
    std::vector<std::uint8_t> first_;
    std::size_t first_sent_ = 0;
    UniqueFd pipe_read_;
    UniqueFd pipe_write_;
    std::vector<std::uint8_t> buffer_;  // only without a pipe
    std::size_t capacity_ = 0;
    std::size_t buffer_head_ = 0;  // next byte to send from buffer_
    std::size_t held_ = 0;         // bytes in the pipe or buffer
    bool pipe_full_ = false;
    bool eof_ = false;
    bool write_shut_ = false;
    std::uint64_t moved_ = 0;
    const char* name_;
};

short events_for(int fd, const Pump& reading, const Pump& writing) {
    short events = 0;
    if (reading.from() == fd && reading.wants_read()) {
        events |= POLLIN;
    }
    if (writing.to() == fd && writing.wants_write()) {
        events |= POLLOUT;
    }
    return events;
}

// splice(2) into a socket whose peer is gone raises SIGPIPE (there is no
// MSG_NOSIGNAL for it): blocked on this thread while joining, and a
// SIGPIPE raised meanwhile is taken before unblocking, so the process
// sees EPIPE only, whatever its disposition.
class SigpipeBlocked {
public:
    SigpipeBlocked() {
        sigset_t pending;
        sigemptyset(&pending);
        ::sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        sigset_t pipe_only;
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        ::pthread_sigmask(SIG_BLOCK, &pipe_only, &previous_);
    }
    ~SigpipeBlocked() {
        if (!was_pending_) {
            sigset_t pipe_only;
            sigemptyset(&pipe_only);
            sigaddset(&pipe_only, SIGPIPE);
            const timespec no_wait{0, 0};
            while (::sigtimedwait(&pipe_only, nullptr, &no_wait) == SIGPIPE) {
            }
        }
        ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
    }
    SigpipeBlocked(const SigpipeBlocked&) = delete;
    SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

private:
    sigset_t previous_{};
    bool was_pending_ = false;
};

// splice(2) into a socket blocks unless the socket itself is non-blocking.
Result<void> set_nonblocking(int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        return sys_error("fcntl");
    }
    return ok();
}

}  // namespace

Result<SpliceTotals> splice_streams(SpliceEnds ends) {
    SigpipeBlocked no_sigpipe;
    for (int fd : {ends.a, ends.b}) {
        if (auto r = set_nonblocking(fd); !r) {
            return r.error();
        }
    }
    Pump a_to_b(ends.a, ends.b, std::move(ends.a_first), ends.zero_copy, "forward");
    Pump b_to_a(ends.b, ends.a, std::move(ends.b_first), ends.zero_copy, "backward");
    // Bytes handed over up front go out before anything is polled.
    for (Pump* pump : {&a_to_b, &b_to_a}) {
        if (auto r = pump->run(false, true); !r) {
            return r.error();
        }
    }
    while (!a_to_b.done() || !b_to_a.done()) {
        pollfd fds[3] = {{ends.a, events_for(ends.a, a_to_b, b_to_a), 0},
                         {ends.b, events_for(ends.b, b_to_a, a_to_b), 0},
                         {ends.stop_fd, POLLIN, 0}};
        // An fd with nothing wanted is left out: a hung-up socket would
        // otherwise report POLLHUP forever and spin the loop.
        for (pollfd& p : fds) {
            if (p.events == 0) {
                p.fd = -1;
            }
        }
        if (::poll(fds, 3, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return sys_error("poll");
        }
        if (fds[2].revents != 0) {
            break;
        }
        // POLLHUP/POLLERR: the next read or write reports what happened.
        constexpr short kFailed = POLLHUP | POLLERR;
        auto readable = [](const pollfd& p) { return (p.revents & (POLLIN | kFailed)) != 0; };
        auto writable = [](const pollfd& p) { return (p.revents & (POLLOUT | kFailed)) != 0; };
        if (auto r = a_to_b.run(readable(fds[0]), writable(fds[1])); !r) {
            return r.error();
        }
        if (auto r = b_to_a.run(readable(fds[1]), writable(fds[0])); !r) {
            return r.error();
        }
    }
    return SpliceTotals{a_to_b.moved(), b_to_a.moved()};
}

}  // namespace sbx::agent

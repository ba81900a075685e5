#include "base/io_ring.hpp"

#include <cerrno>
#include <vector>

namespace sbx {

Result<IoRing> IoRing::create(unsigned entries, int file) {
    auto event = EventFd::create(/*nonblocking=*/true);
    if (!event) {
        return event.error();
    }
    auto ring = std::make_unique<io_uring>();
    // SUBMIT_ALL (Linux 5.18): one entry failing at submission does not
    // hold back the rest of the batch.
    // R_DISABLED (Linux 5.10): the ring takes no submission until
    // restrict_and_enable() below has limited what it accepts.
    io_uring_params params{};
    params.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_R_DISABLED;
    if (int r = io_uring_queue_init_params(entries, ring.get(), &params); r < 0) {
        return errno_error("io_uring setup", -r);
    }
    IoRing result(std::move(ring), std::move(*event));  // tears the ring down from here on
    if (int r = io_uring_register_files(result.ring_.get(), &file, 1); r < 0) {
        return errno_error("io_uring file registration", -r);
    }
    if (int r = io_uring_register_eventfd(result.ring_.get(), result.event_.fd()); r < 0) {
        return errno_error("io_uring eventfd registration", -r);
    }
    if (auto r = result.restrict_and_enable(); !r) {
        return r.error();
    }
    return result;
}

// IORING_REGISTER_RESTRICTIONS (Linux 5.10, io_uring_register(2)): once the
// ring is enabled, a submission whose opcode is not in kAllowedOps, or whose
// flags are not within IOSQE_FIXED_FILE, fails with -EACCES, and every
// io_uring_register() call on the ring fails. seccomp sees io_uring_enter,
// not the operations it carries: without this, a thread allowed to call it
// could open files or sockets through the ring (IORING_OP_OPENAT, _SOCKET,
// _CONNECT) that its filter refuses as system calls.
Result<void> IoRing::restrict_and_enable() {
    std::vector<io_uring_restriction> rules;
    for (std::uint8_t op : kAllowedOps) {
        io_uring_restriction rule{};
        rule.opcode = IORING_RESTRICTION_SQE_OP;
        rule.sqe_op = op;
        rules.push_back(rule);
    }
    io_uring_restriction flags{};
    flags.opcode = IORING_RESTRICTION_SQE_FLAGS_ALLOWED;
    flags.sqe_flags = IOSQE_FIXED_FILE;
    rules.push_back(flags);
    // Through io_uring_register(): Debian's liburing 2.3 declares
    // io_uring_register_restrictions() and io_uring_enable_rings() but does
    // not export them.
    const auto fd = static_cast<unsigned>(ring_->ring_fd);
    if (int r = io_uring_register(fd, IORING_REGISTER_RESTRICTIONS, rules.data(), static_cast<unsigned>(rules.size()));
        r < 0) {
        return errno_error("io_uring restrictions", -r);
    }
    if (int r = io_uring_register(fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0); r < 0) {
        return errno_error("io_uring enable", -r);
    }
    return ok();
}

IoRing::IoRing(IoRing&& other) noexcept : ring_(std::move(other.ring_)), event_(std::move(other.event_)) {}

IoRing::~IoRing() {
    if (ring_) {
        io_uring_queue_exit(ring_.get());
    }
}

void IoRing::clear_event() const {
    [[maybe_unused]] auto r = event_.consume();
}

// `prep` gets the file operand: fixed index 0, or `fd` itself.
template <typename Prep>
io_uring_sqe* IoRing::prepare(std::uint64_t user_data, Prep&& prep, int fd) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe != nullptr) {
        prep(sqe, fd == kFixedFile ? 0 : fd);
        io_uring_sqe_set_flags(sqe, fd == kFixedFile ? IOSQE_FIXED_FILE : 0);
        io_uring_sqe_set_data64(sqe, user_data);
    }
    return sqe;
}

io_uring_sqe* IoRing::readv(std::uint64_t user_data, const iovec* iov, unsigned count, std::uint64_t offset,
                            int fd) {
    return prepare(
        user_data, [&](io_uring_sqe* sqe, int file) { io_uring_prep_readv(sqe, file, iov, count, offset); }, fd);
}

io_uring_sqe* IoRing::writev(std::uint64_t user_data, const iovec* iov, unsigned count, std::uint64_t offset,
                             int fd) {
    return prepare(
        user_data, [&](io_uring_sqe* sqe, int file) { io_uring_prep_writev(sqe, file, iov, count, offset); }, fd);
}

io_uring_sqe* IoRing::fdatasync(std::uint64_t user_data) {
    return prepare(user_data,
                   [](io_uring_sqe* sqe, int file) { io_uring_prep_fsync(sqe, file, IORING_FSYNC_DATASYNC); });
}

io_uring_sqe* IoRing::fallocate(std::uint64_t user_data, int mode, std::uint64_t offset, std::uint64_t len) {
    return prepare(user_data, [&](io_uring_sqe* sqe, int file) {
        io_uring_prep_fallocate(sqe, file, mode, static_cast<off_t>(offset), static_cast<off_t>(len));
    });
}

Result<void> IoRing::submit() {
    int r = 0;
    do {
        r = io_uring_submit(ring_.get());
    } while (r == -EINTR);
    if (r < 0 && r != -EAGAIN && r != -EBUSY) {
        return errno_error("io_uring submit", -r);
    }
    return ok();
}

Result<void> IoRing::cancel_all() {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) {  // the submission ring is full: make room
        if (auto r = submit(); !r) {
            return r;
        }
        sqe = io_uring_get_sqe(ring_.get());
    }
    if (sqe == nullptr) {
        return make_coded_error("busy", "io_uring: no submission slot for the cancel");
    }
    io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data64(sqe, kInternal);
    return submit();
}

Result<bool> IoRing::submit_and_wait_one(std::chrono::milliseconds timeout) {
    __kernel_timespec ts{};
    ts.tv_sec = timeout.count() / 1000;
    ts.tv_nsec = (timeout.count() % 1000) * 1'000'000;
    io_uring_cqe* cqe = nullptr;
    int r = io_uring_submit_and_wait_timeout(ring_.get(), &cqe, 1, &ts, nullptr);
    if (r == -ETIME) {
        return false;
    }
    if (r == -EINTR) {
        return make_coded_error("interrupted", "io_uring wait interrupted by a signal");
    }
    if (r < 0 && r != -EAGAIN && r != -EBUSY) {
        return errno_error("io_uring wait", -r);
    }
    return io_uring_cq_ready(ring_.get()) > 0;
}

Result<void> IoRing::submit_and_wait_one() {
    for (;;) {
        int r = io_uring_submit_and_wait(ring_.get(), 1);
        if (r == -EINTR) {
            return make_coded_error("interrupted", "io_uring wait interrupted by a signal");
        }
        if (r < 0 && r != -EAGAIN && r != -EBUSY) {
            return errno_error("io_uring wait", -r);
        }
        if (io_uring_cq_ready(ring_.get()) > 0) {
            return ok();
        }
    }
}

void skip_iovec_bytes(std::vector<iovec>& iov, std::size_t bytes) {
    std::size_t whole = 0;
    while (whole < iov.size() && bytes >= iov[whole].iov_len) {
        bytes -= iov[whole].iov_len;
        ++whole;
    }
    iov.erase(iov.begin(), iov.begin() + static_cast<std::ptrdiff_t>(whole));
    if (!iov.empty() && bytes > 0) {
        iov.front().iov_base = static_cast<char*>(iov.front().iov_base) + bytes;
        iov.front().iov_len -= bytes;
    }
}

}  // namespace sbx

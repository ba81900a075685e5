#include "snapshot/format/io_queue.hpp"
#include "snapshot/format/types.hpp"

#include <unistd.h>

#include <cerrno>

namespace sbx::snapshot {

void IoQueue::RingDeleter::operator()(io_uring* ring) const {
    io_uring_queue_exit(ring);
    delete ring;  // NOLINT(cppcoreguidelines-owning-memory)
}

IoQueue IoQueue::create(int fd, unsigned depth) {
    depth = depth == 0 ? 1 : depth;
    auto ring = std::make_unique<io_uring>();
    std::unique_ptr<io_uring, RingDeleter> owned;
    if (io_uring_queue_init(depth, ring.get(), 0) == 0) {
        owned.reset(ring.release());
    }
    return IoQueue(fd, depth, std::move(owned));
}

IoQueue::IoQueue(int fd, unsigned depth, std::unique_ptr<io_uring, RingDeleter> ring)
    : fd_(fd), ring_(std::move(ring)), ops_(depth) {
    for (unsigned i = depth; i > 0; --i) {
        free_.push_back(i - 1);
    }
}

IoQueue::~IoQueue() {
    if (!ring_) {
        return;
    }
    while (ops_.size() > free_.size()) {
        io_uring_cqe* cqe = nullptr;
        int r = io_uring_wait_cqe(ring_.get(), &cqe);
        if (r == -EINTR) {
            continue;
        }
        if (r < 0) {
            break;  // the ring teardown below still waits for the kernel
        }
        free_.push_back(static_cast<unsigned>(io_uring_cqe_get_data64(cqe)));
        io_uring_cqe_seen(ring_.get(), cqe);
    }
}

Result<void> IoQueue::write(std::uint64_t tag, const void* data, std::size_t size, std::uint64_t offset) {
    return start({tag, true, static_cast<const std::uint8_t*>(data), nullptr, size, 0, offset});
}

Result<void> IoQueue::read(std::uint64_t tag, void* data, std::size_t size, std::uint64_t offset) {
    return start({tag, false, nullptr, static_cast<std::uint8_t*>(data), size, 0, offset});
}

Result<void> IoQueue::start(Op op) {
    if (free_.empty()) {
        return format_error("io", "transfer queue is full");
    }
    if (op.size == 0) {
        sync_done_.push_back(op.tag);
        return ok();
    }
    if (!ring_) {
        while (op.done < op.size) {
            auto off = static_cast<off_t>(op.offset + op.done);
            ssize_t n = op.write ? ::pwrite(fd_, op.src + op.done, op.size - op.done, off)
                                 : ::pread(fd_, op.dst + op.done, op.size - op.done, off);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                return sys_error("io: {} of {} bytes at offset {}", op.write ? "write" : "read", op.size,
                                 off).with_code("io");
            }
            if (n == 0) {
                return op.write ? format_error("io", "write at offset {} made no progress", off)
                                : format_error("truncated", "read past the end of the file at offset {}", off);
            }
            op.done += static_cast<std::size_t>(n);
        }
        sync_done_.push_back(op.tag);
        return ok();
    }
    unsigned slot = free_.back();
    free_.pop_back();
    ops_[slot] = op;
    return submit(slot);
}

Result<void> IoQueue::submit(unsigned slot) {
    Op& op = ops_[slot];
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) {  // cannot happen: the ring has a slot per operation and submits each at once
        free_.push_back(slot);
        return format_error("io", "io_uring submission ring is full");
    }
    auto remaining = static_cast<unsigned>(op.size - op.done);
    if (op.write) {
        io_uring_prep_write(sqe, fd_, op.src + op.done, remaining, op.offset + op.done);
    } else {
        io_uring_prep_read(sqe, fd_, op.dst + op.done, remaining, op.offset + op.done);
    }
    io_uring_sqe_set_data64(sqe, slot);
    for (;;) {
        int r = io_uring_submit(ring_.get());
        if (r >= 0) {
            return ok();
        }
        if (r != -EINTR && r != -EAGAIN && r != -EBUSY) {
            // The entry stays queued and goes out with the next submit; report the failure.
            return errno_error("io: io_uring submit", -r).with_code("io");
        }
    }
}

Result<void> IoQueue::finish(unsigned slot, int res, std::vector<std::uint64_t>& finished) {
    Op& op = ops_[slot];
    if (res <= 0) {
        free_.push_back(slot);
        if (res < 0) {
            return errno_error(op.write ? "io: write" : "io: read", -res).with_code("io");
        }
        return op.write
                   ? format_error("io", "write at offset {} made no progress", op.offset + op.done)
                   : format_error("truncated", "read past the end of the file at offset {}", op.offset + op.done);
    }
    op.done += static_cast<std::size_t>(res);
    if (op.done < op.size) {
        return submit(slot);  // a short transfer: continue where it stopped
    }
    finished.push_back(op.tag);
    free_.push_back(slot);
    return ok();
}

Result<void> IoQueue::wait(const std::function<void(std::uint64_t)>& done) {
    std::vector<std::uint64_t> finished;
    finished.swap(sync_done_);
    Result<void> result = ok();
    if (ring_ && finished.empty() && ops_.size() > free_.size()) {
        io_uring_cqe* cqe = nullptr;
        int r = 0;
        do {
            r = io_uring_wait_cqe(ring_.get(), &cqe);
        } while (r == -EINTR);
        if (r < 0) {
            return errno_error("io: io_uring wait", -r).with_code("io");
        }
        while (cqe != nullptr) {
            auto slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
            int res = cqe->res;
            io_uring_cqe_seen(ring_.get(), cqe);
            if (auto f = finish(slot, res, finished); !f && result) {
                result = f;
            }
            cqe = nullptr;
            if (io_uring_peek_cqe(ring_.get(), &cqe) != 0) {
                cqe = nullptr;
            }
        }
    }
    for (auto tag : finished) {
        done(tag);
    }
    return result;
}

Result<void> IoQueue::drain(const std::function<void(std::uint64_t)>& done) {
    Result<void> result = ok();
    while (pending() > 0) {
        const auto before = pending();
        if (auto w = wait(done); !w && result) {
            result = w;
        }
        if (pending() == before) {
            break;  // the ring itself failed; the destructor still waits
        }
    }
    return result;
}

}  // namespace sbx::snapshot

#include "snapshot/format/io_queue.hpp"
#include "snapshot/format/types.hpp"

#include <unistd.h>

#include <cerrno>

namespace sbx::snapshot {

namespace {

// A full file system or quota is "no_space" (the caller may free some and
// retry; the snapshot file is left as it was), any other failure "io".
std::string_view failure_code(int err) { return err == ENOSPC || err == EDQUOT ? "no_space" : "io"; }

}  // namespace

IoQueue IoQueue::create(int fd, unsigned depth) {
    depth = depth == 0 ? 1 : depth;
    std::optional<IoRing> ring;
    if (auto made = IoRing::create(depth, fd)) {
        ring.emplace(std::move(*made));
    }
    return IoQueue(fd, depth, std::move(ring));
}

IoQueue::IoQueue(int fd, unsigned depth, std::optional<IoRing> ring)
    : fd_(fd), ring_(std::move(ring)), ops_(depth) {
    for (unsigned i = depth; i > 0; --i) {
        free_.push_back(i - 1);
    }
}

// The kernel writes into (or reads from) the buffers until each request
// ends: outwait them all. (A moved-from queue has no operations.)
IoQueue::~IoQueue() {
    while (ring_ && in_ring() > 0) {
        if (auto w = ring_->submit_and_wait_one(); !w && w.error().code != "interrupted") {
            break;  // the ring's teardown still waits for the kernel
        }
        ring_->reap([&](std::uint64_t slot, int) { free_.push_back(static_cast<unsigned>(slot)); });
    }
}

Result<void> IoQueue::write(std::uint64_t tag, const void* data, std::size_t size, std::uint64_t offset) {
    // iovec has no const member; a write only reads the buffer.
    return start({tag, true, static_cast<std::uint8_t*>(const_cast<void*>(data)), size, 0, offset});
}

Result<void> IoQueue::read(std::uint64_t tag, void* data, std::size_t size, std::uint64_t offset) {
    return start({tag, false, static_cast<std::uint8_t*>(data), size, 0, offset});
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
        if (auto moved = transfer_now(op); !moved) {
            return moved;
        }
        sync_done_.push_back(op.tag);
        return ok();
    }
    unsigned slot = free_.back();
    free_.pop_back();
    ops_[slot] = op;
    return submit(slot);
}

// The fallback: pread/pwrite until the whole transfer is done.
Result<void> IoQueue::transfer_now(Op& op) const {
    while (op.done < op.size) {
        auto off = static_cast<off_t>(op.offset + op.done);
        ssize_t n = op.write ? ::pwrite(fd_, op.data + op.done, op.size - op.done, off)
                             : ::pread(fd_, op.data + op.done, op.size - op.done, off);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            const int err = errno;
            return sys_error("io: {} of {} bytes at offset {}", op.write ? "write" : "read", op.size, off)
                .with_code(failure_code(err));
        }
        if (n == 0) {
            return op.write ? format_error("io", "write at offset {} made no progress", off)
                            : format_error("truncated", "read past the end of the file at offset {}", off);
        }
        op.done += static_cast<std::size_t>(n);
    }
    return ok();
}

Result<void> IoQueue::submit(unsigned slot) {
    Op& op = ops_[slot];
    op.iov = {op.data + op.done, op.size - op.done};
    const std::uint64_t at = op.offset + op.done;
    if ((op.write ? ring_->writev(slot, &op.iov, 1, at) : ring_->readv(slot, &op.iov, 1, at)) == nullptr) {
        // cannot happen: the ring has a slot per operation
        free_.push_back(slot);
        return format_error("io", "io_uring submission ring is full");
    }
    // On failure the entry stays queued and goes out with the next wait.
    if (auto r = ring_->submit(); !r) {
        return r.error().with_code("io");
    }
    return ok();
}

Result<void> IoQueue::finish(unsigned slot, int res, std::vector<std::uint64_t>& finished) {
    Op& op = ops_[slot];
    if (res <= 0) {
        free_.push_back(slot);
        if (res < 0) {
            return errno_error(op.write ? "io: write" : "io: read", -res).with_code(failure_code(-res));
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

// Waits until a transfer finished or failed: a completion that only
// continued a short transfer is not the end of the wait.
Result<void> IoQueue::wait(const std::function<void(std::uint64_t)>& done) {
    std::vector<std::uint64_t> finished;
    finished.swap(sync_done_);
    Result<void> result = ok();
    while (ring_ && result && finished.empty() && in_ring() > 0) {
        if (auto w = ring_->submit_and_wait_one(); !w) {
            if (w.error().code == "interrupted") {
                continue;
            }
            result = w.error().with_code("io");
            break;
        }
        ring_->reap([&](std::uint64_t slot, int res) {
            if (auto f = finish(static_cast<unsigned>(slot), res, finished); !f && result) {
                result = f;
            }
        });
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

// Reads and writes of one file through io_uring (base/io_ring.hpp), with
// short transfers resubmitted; falls back to pread/pwrite when the kernel
// refuses io_uring (seccomp, old kernels). Not thread-safe: one owner thread.
// Buffers must stay valid until their completion is reported or the queue
// is destroyed (the destructor waits for everything in flight).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "base/io_ring.hpp"
#include "base/result.hpp"

namespace sbx::snapshot {

class IoQueue {
public:
    // `depth` operations may be in flight at once.
    static IoQueue create(int fd, unsigned depth);
    IoQueue(IoQueue&&) noexcept = default;
    IoQueue& operator=(IoQueue&&) = delete;
    IoQueue(const IoQueue&) = delete;
    IoQueue& operator=(const IoQueue&) = delete;
    ~IoQueue();

    [[nodiscard]] bool full() const { return free_.empty(); }
    // Transfers whose completion has not been reported yet.
    [[nodiscard]] std::size_t pending() const { return in_ring() + sync_done_.size(); }
    [[nodiscard]] bool uses_io_uring() const { return ring_.has_value(); }

    // Queue a transfer (requires !full()); `tag` is reported on completion.
    [[nodiscard]] Result<void> write(std::uint64_t tag, const void* data, std::size_t size,
                                     std::uint64_t offset);
    [[nodiscard]] Result<void> read(std::uint64_t tag, void* data, std::size_t size, std::uint64_t offset);

    // Blocks until at least one transfer finished (when any is in flight)
    // and calls done(tag) for each finished one. A failed transfer is
    // returned as an `io:` (or `truncated:` for a read past the end) error.
    [[nodiscard]] Result<void> wait(const std::function<void(std::uint64_t)>& done);
    // Waits for everything in flight; the first error wins.
    [[nodiscard]] Result<void> drain(const std::function<void(std::uint64_t)>& done);

private:
    struct Op {
        std::uint64_t tag = 0;
        bool write = false;
        std::uint8_t* data = nullptr;  // a write's source, a read's destination
        std::size_t size = 0;
        std::size_t done = 0;
        std::uint64_t offset = 0;
        iovec iov{};  // the part still to move, while it is in the ring
    };

    IoQueue(int fd, unsigned depth, std::optional<IoRing> ring);
    [[nodiscard]] Result<void> start(Op op);
    [[nodiscard]] Result<void> transfer_now(Op& op) const;
    [[nodiscard]] Result<void> submit(unsigned slot);
    [[nodiscard]] Result<void> finish(unsigned slot, int res, std::vector<std::uint64_t>& finished);
    [[nodiscard]] std::size_t in_ring() const { return ops_.size() - free_.size(); }

    int fd_;
    std::optional<IoRing> ring_;  // none: synchronous fallback
    std::vector<Op> ops_;         // never resized: the ring holds pointers to their iov
    std::vector<unsigned> free_;
    std::vector<std::uint64_t> sync_done_;  // fallback completions not yet reported
};

}  // namespace sbx::snapshot

// One io_uring for one file (a disk image, a snapshot): the file registered
// as fixed file 0, completions announced on an eventfd
// (io_uring_register_eventfd) that an event loop can watch. The one owner of
// io_uring in the tree: virtio-blk and its qcow2 backend use it directly,
// snapshots through snapshot::IoQueue. Not thread-safe: one owner thread
// (virtio-blk: under its device lock).
#pragma once

#include <liburing.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/event_fd.hpp"
#include "base/result.hpp"

namespace sbx {

class IoRing {
public:
    // A ring of `entries` submission slots (completion ring twice that),
    // with `file` registered at fixed index 0 for every operation.
    static Result<IoRing> create(unsigned entries, int file);
    IoRing(IoRing&&) noexcept;
    IoRing& operator=(IoRing&&) = delete;
    IoRing(const IoRing&) = delete;
    IoRing& operator=(const IoRing&) = delete;
    ~IoRing();

    // Readable when completions are waiting.
    [[nodiscard]] int event_fd() const { return event_.fd(); }
    // Clears the eventfd counter (before reaping, so a completion posted
    // meanwhile leaves it readable again).
    void clear_event() const;

    // A prepared submission entry targeting fixed file 0, or null when the
    // submission ring is full. `user_data` comes back in the completion.
    // Reads and writes may target another open file `fd` instead (a qcow2
    // image's backing file).
    static constexpr int kFixedFile = -1;
    [[nodiscard]] io_uring_sqe* readv(std::uint64_t user_data, const iovec* iov, unsigned count,
                                      std::uint64_t offset, int fd = kFixedFile);
    [[nodiscard]] io_uring_sqe* writev(std::uint64_t user_data, const iovec* iov, unsigned count,
                                       std::uint64_t offset, int fd = kFixedFile);
    [[nodiscard]] io_uring_sqe* fdatasync(std::uint64_t user_data);
    [[nodiscard]] io_uring_sqe* fallocate(std::uint64_t user_data, int mode, std::uint64_t offset,
                                          std::uint64_t len);

    // Entries prepared but not yet taken by the kernel.
    [[nodiscard]] unsigned unsubmitted() const { return io_uring_sq_ready(ring_.get()); }
    // One io_uring_enter for everything prepared (again when a signal
    // interrupts it). The kernel refusing for now (EAGAIN, EBUSY) is not an
    // error: the entries stay in the ring for the next call.
    [[nodiscard]] Result<void> submit();
    // Asks the kernel to cancel every request in flight
    // (IORING_ASYNC_CANCEL_ANY, Linux 5.19): queued ones complete at once
    // with -ECANCELED, one already running completes when it ends. The
    // cancel's own completion is never passed to reap().
    [[nodiscard]] Result<void> cancel_all();

    [[nodiscard]] unsigned completions_waiting() const { return io_uring_cq_ready(ring_.get()); }
    // Calls fn(user_data, res) for every completion waiting; returns how many.
    template <typename Fn>
    unsigned reap(Fn&& fn);
    // Submits what is pending and waits until at least one completion is
    // waiting (true) or `timeout` passes (false). A signal ends the wait
    // early with the error code "interrupted".
    [[nodiscard]] Result<bool> submit_and_wait_one(std::chrono::milliseconds timeout);
    // The same without a bound: returns once a completion is waiting (call
    // it only with a request in flight).
    [[nodiscard]] Result<void> submit_and_wait_one();

    // user_data of the ring's own requests (cancel_all), skipped by reap().
    static constexpr std::uint64_t kInternal = ~std::uint64_t{0};

    // The only operations the ring accepts (see restrict_and_enable): what
    // the methods above prepare. Anything else completes with -EACCES.
    static constexpr std::array<std::uint8_t, 5> kAllowedOps = {
        IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_FSYNC, IORING_OP_FALLOCATE, IORING_OP_ASYNC_CANCEL};

private:
    IoRing(std::unique_ptr<io_uring> ring, EventFd event)
        : ring_(std::move(ring)), event_(std::move(event)) {}
    [[nodiscard]] Result<void> restrict_and_enable();
    template <typename Prep>
    [[nodiscard]] io_uring_sqe* prepare(std::uint64_t user_data, Prep&& prep, int fd = kFixedFile);

    std::unique_ptr<io_uring> ring_;  // null once moved from
    EventFd event_;
};

// Drops the first `bytes` of `iov` (what a short transfer moved), so that
// the rest can be submitted again from where it stopped.
void skip_iovec_bytes(std::vector<iovec>& iov, std::size_t bytes);

template <typename Fn>
unsigned IoRing::reap(Fn&& fn) {
    unsigned seen = 0;
    unsigned head = 0;
    io_uring_cqe* cqe = nullptr;
    unsigned passed = 0;
    io_uring_for_each_cqe(ring_.get(), head, cqe) {
        ++seen;
        if (io_uring_cqe_get_data64(cqe) != kInternal) {
            fn(io_uring_cqe_get_data64(cqe), cqe->res);
            ++passed;
        }
    }
    io_uring_cq_advance(ring_.get(), seen);
    return passed;
}

}  // namespace sbx

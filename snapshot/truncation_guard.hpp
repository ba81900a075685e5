// A copy-on-write restore maps the snapshot file into guest memory
// (MAP_PRIVATE). If the file shrinks under the running VM, the next touch of
// a page past its new end raises SIGBUS (mmap(2)): KVM turns a vCPU's touch
// into an EFAULT exit, but a device thread's or the VMM's own touch would
// kill the process without a word. While a guard lives, a SIGBUS at an
// address inside its mapping writes one line naming the file and ends the
// process with the VMM-error status (4) instead; any other SIGBUS goes to
// the handler that was there before (or the default action).
//
// A signal handler can only reach process-wide state: the guarded ranges
// live in one fixed table (kMaxGuards entries) with lock-free slots.
#pragma once

#include <cstddef>
#include <string>

#include "base/result.hpp"

namespace sbx::snapshot {

class TruncationGuard {
public:
    static constexpr std::size_t kMaxGuards = 64;
    static constexpr int kExitStatus = 4;  // sbx-vmm's "VMM error"

    // Guards [start, start + length), mapped from `path`.
    [[nodiscard]] static Result<TruncationGuard> install(const void* start, std::size_t length,
                                                         const std::string& path);
    TruncationGuard(TruncationGuard&& other) noexcept : slot_(other.slot_) { other.slot_ = kNone; }
    TruncationGuard& operator=(TruncationGuard&&) = delete;
    TruncationGuard(const TruncationGuard&) = delete;
    TruncationGuard& operator=(const TruncationGuard&) = delete;
    ~TruncationGuard();

private:
    static constexpr std::size_t kNone = ~std::size_t{0};
    explicit TruncationGuard(std::size_t slot) : slot_(slot) {}
    std::size_t slot_;
};

}  // namespace sbx::snapshot

// Guest memory restored from a snapshot can fault in the VMM's own threads:
//  - Bus: a copy-on-write restore maps the snapshot file (MAP_PRIVATE); if
//    the file shrinks under the running VM, touching a page past its new end
//    raises SIGBUS (mmap(2));
//  - Segv: a lazy restore makes a chunk that fails to verify PROT_NONE
//    (lazy_memory.cpp), so touching it raises SIGSEGV.
// KVM turns a vCPU's touch into an EFAULT exit, but a device thread's touch
// would kill the process without a word. While a guard lives, that signal at
// an address inside its range writes the guard's one-line message and ends
// the process with the VMM-error status (4) instead; any other goes to the
// handler that was there before (or the default action).
//
// A signal handler can only reach process-wide state: the guarded ranges
// live in one fixed table (kMaxGuards entries) with lock-free slots.
#pragma once

#include <cstddef>
#include <string_view>

#include "base/result.hpp"

namespace sbx::snapshot {

class MappingGuard {
public:
    enum class Fault { Bus, Segv };
    static constexpr std::size_t kMaxGuards = 64;
    static constexpr std::size_t kMaxMessage = 511;  // longer ones are cut
    static constexpr int kExitStatus = 4;             // sbx-vmm's "VMM error"

    // Guards [start, start + length) against `fault`; `message` is printed
    // (with a newline) when it strikes.
    [[nodiscard]] static Result<MappingGuard> install(Fault fault, const void* start, std::size_t length,
                                                      std::string_view message);
    MappingGuard(MappingGuard&& other) noexcept : slot_(other.slot_) { other.slot_ = kNone; }
    MappingGuard& operator=(MappingGuard&&) = delete;
    MappingGuard(const MappingGuard&) = delete;
    MappingGuard& operator=(const MappingGuard&) = delete;
    ~MappingGuard();

    // Replaces the message (a lazy restore's first error, say). Not from a
    // signal handler; a fault meanwhile prints the old or the new one.
    void set_message(std::string_view message);

private:
    static constexpr std::size_t kNone = ~std::size_t{0};
    explicit MappingGuard(std::size_t slot) : slot_(slot) {}
    std::size_t slot_;
};

}  // namespace sbx::snapshot

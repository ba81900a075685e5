#include "host-tools/sbxd/daemon/admission.hpp"

#include <algorithm>
#include <set>
#include <string_view>
#include <utility>

#include "host-tools/sbxd/api/api_error.hpp"

namespace sbx::sbxd {

Admission::Ticket& Admission::Ticket::operator=(Ticket&& other) noexcept {
    if (this != &other) {
        release();
        owner_ = std::exchange(other.owner_, nullptr);
        id_ = std::exchange(other.id_, 0);
        committed_ = std::exchange(other.committed_, false);
    }
    return *this;
}

void Admission::Ticket::release() {
    if (owner_ != nullptr) {
        owner_->release(id_, committed_);
        owner_ = nullptr;
    }
}

Admission::Admission(AdmissionLimits limits, UsageSource usage, std::function<UnixMillis()> clock)
    : limits_(limits), usage_(std::move(usage)), clock_(std::move(clock)) {}

void Admission::prune_locked(UnixMillis now) {
    while (!starts_.empty() && starts_.front().at <= now - kStartWindowMs) {
        starts_.pop_front();
    }
}

Admission::Count Admission::count_locked(const Usage& usage) const {
    Count c{static_cast<int>(usage.memory_mib_by_id.size()), 0};
    for (const auto& [id, memory] : usage.memory_mib_by_id) {
        c.memory_mib += memory;
    }
    std::set<std::string_view> seen;
    for (const auto& [ticket, slots] : reserved_) {
        for (const Slot& slot : slots) {
            if (!usage.memory_mib_by_id.contains(slot.sandbox_id) && seen.insert(slot.sandbox_id).second) {
                ++c.running;
                c.memory_mib += slot.memory_mib;
            }
        }
    }
    return c;
}

Admission::Decision Admission::admit(const Demand& demand) {
    std::lock_guard lock(mutex_);
    const UnixMillis now = clock_();
    prune_locked(now);
    auto usage = usage_();
    if (!usage) {
        return Refusal{usage.error()};
    }
    const auto [running, memory] = count_locked(*usage);
    int new_running = 0;
    std::int64_t new_memory = 0;
    for (const Slot& slot : demand.slots) {
        if (!usage->memory_mib_by_id.contains(slot.sandbox_id)) {
            ++new_running;
            new_memory += slot.memory_mib;
        }
    }
    if (running + new_running > limits_.max_running) {
        return Refusal{make_coded_error(api::code::kLimitReached,
                                        "{} sandbox(es) running or starting and this needs {} more: the "
                                        "limit is {} running at once (sbxd --max-running)",
                                        running, new_running, limits_.max_running)};
    }
    if (memory + new_memory > limits_.memory_budget_mib) {
        return Refusal{make_coded_error(api::code::kCapacityExceeded,
                                        "{} MiB more does not fit: sandboxes running or starting have {} "
                                        "MiB of this host's {} MiB for sandboxes (sbxd --memory-budget-mib)",
                                        new_memory, memory, limits_.memory_budget_mib)};
    }
    const int window = static_cast<int>(starts_.size());
    if (demand.starts > limits_.max_starts_per_minute) {
        // Never fits, so no Retry-After: a smaller request does.
        return Refusal{make_coded_error(api::code::kLimitReached,
                                        "{} starts at once exceed the limit of {} starts per minute "
                                        "(sbxd --max-starts-per-minute)",
                                        demand.starts, limits_.max_starts_per_minute)};
    }
    if (window + demand.starts > limits_.max_starts_per_minute) {
        // The start whose leaving the window makes room for this one.
        const auto& freeing =
            starts_[static_cast<std::size_t>(window + demand.starts - limits_.max_starts_per_minute - 1)];
        const UnixMillis wait_ms = freeing.at + kStartWindowMs - now;
        const int seconds = std::max<int>(1, static_cast<int>((wait_ms + 999) / 1000));
        return Refusal{make_coded_error(api::code::kRateLimited,
                                        "{} start(s) in the last 60 s: the limit is {} per minute "
                                        "(sbxd --max-starts-per-minute); retry in {} s",
                                        window, limits_.max_starts_per_minute, seconds),
                       seconds};
    }
    const std::uint64_t id = ++next_id_;
    reserved_[id] = demand.slots;
    for (int i = 0; i < demand.starts; ++i) {
        starts_.push_back(Start{now, id});
    }
    return Ticket(this, id);
}

void Admission::release(std::uint64_t id, bool committed) {
    std::lock_guard lock(mutex_);
    reserved_.erase(id);
    if (!committed) {
        std::erase_if(starts_, [id](const Start& s) { return s.ticket == id; });
    }
}

Result<AdmissionReport> Admission::report() {
    std::lock_guard lock(mutex_);
    prune_locked(clock_());
    auto usage = usage_();
    if (!usage) {
        return usage.error();
    }
    const Count c = count_locked(*usage);
    AdmissionReport r{c.running, c.memory_mib, static_cast<int>(starts_.size())};
    return r;
}

}  // namespace sbx::sbxd

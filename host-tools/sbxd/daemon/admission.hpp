// Admission control for starts (docs/api.md "Errors", docs/sbxd.md
// "Admission"): a create, a resume and each fork child is a start. Before
// the driver runs, admit() checks and reserves in one step under one
// mutex, so two workers can never both take the last slot:
//   limit_reached      running sandboxes (running, stopping, and starts
//                      in flight) would exceed max_running
//   capacity_exceeded  their memoryMib would exceed the memory budget
//   rate_limited       more than max_starts_per_minute starts in the last
//                      60 s (a sliding window), with the seconds until one
//                      more fits (Retry-After, RFC 9110 §10.2.3)
// A reservation names the sandboxes it will have running (a create's new
// id, a fork's children and its parent, a resumed sandbox) and counts each
// only while the store does not show that sandbox running or stopping, so
// a sandbox the driver has already marked running is never counted twice.
// The Ticket holds the reservation until the driver is done; a ticket never
// committed (the driver failed, or replayed an earlier request) gives its
// starts back.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

struct AdmissionLimits {
    int max_running = 64;
    int max_starts_per_minute = 60;
    std::int64_t memory_budget_mib = 0;  // sum of memoryMib of running sandboxes
};

// What the store shows running now (running or stopping): memoryMib by
// sandbox id.
struct Usage {
    std::unordered_map<std::string, std::int64_t> memory_mib_by_id;
};

// A sandbox that will be running after the operation.
struct Slot {
    std::string sandbox_id;
    std::int64_t memory_mib = 0;
};

struct Demand {
    int starts = 0;  // counted against the start rate
    // Checked against the limits unless the store shows them running
    // already (a memory fork's parent, which stops and restarts inside the
    // fork, is held this way without being counted twice).
    std::vector<Slot> slots;
};

struct AdmissionReport {
    int running = 0;  // Usage plus reservations in flight
    std::int64_t memory_mib = 0;
    int starts_last_minute = 0;
};

inline constexpr UnixMillis kStartWindowMs = 60'000;

class Admission {
public:
    using UsageSource = std::function<Result<Usage>()>;

    class Ticket {
    public:
        Ticket() = default;
        Ticket(Ticket&& other) noexcept { *this = std::move(other); }
        Ticket& operator=(Ticket&& other) noexcept;
        Ticket(const Ticket&) = delete;
        Ticket& operator=(const Ticket&) = delete;
        ~Ticket() { release(); }
        // The starts happened: they stay in the rate window.
        void commit() { committed_ = true; }

    private:
        friend class Admission;
        Ticket(Admission* owner, std::uint64_t id) : owner_(owner), id_(id) {}
        void release();
        Admission* owner_ = nullptr;
        std::uint64_t id_ = 0;
        bool committed_ = false;
    };

    struct Refusal {
        Error error;
        int retry_after_seconds = 0;  // rate_limited only
    };
    using Decision = std::variant<Ticket, Refusal>;

    // `usage` is read under the admission mutex, so what it reports and
    // the reservations in flight are one consistent count.
    Admission(AdmissionLimits limits, UsageSource usage, std::function<UnixMillis()> clock);
    Admission(const Admission&) = delete;
    Admission& operator=(const Admission&) = delete;

    [[nodiscard]] Decision admit(const Demand& demand);
    [[nodiscard]] Result<AdmissionReport> report();
    [[nodiscard]] const AdmissionLimits& limits() const { return limits_; }

private:
    struct Count {
        int running = 0;
        std::int64_t memory_mib = 0;
    };
    struct Start {
        UnixMillis at = 0;
        std::uint64_t ticket = 0;
    };
    void release(std::uint64_t id, bool committed);
    void prune_locked(UnixMillis now);
    // The usage plus every reserved slot the usage does not show.
    [[nodiscard]] Count count_locked(const Usage& usage) const;

    AdmissionLimits limits_;
    UsageSource usage_;
    std::function<UnixMillis()> clock_;
    std::mutex mutex_;
    std::uint64_t next_id_ = 0;
    std::map<std::uint64_t, std::vector<Slot>> reserved_;
    std::deque<Start> starts_;  // oldest first
};

}  // namespace sbx::sbxd

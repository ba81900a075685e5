// sbxd's lifecycle timers (product.md §2; docs/sbxd.md, "Lifecycle
// timers"): the auto-stop, a deadline after which a sandbox is stopped
// with memory (state stopped), and the idle pause, after idleMinutes with
// no exec, file or process request (state paused; the next such request
// wakes it, GuestRoutes).
//
// Deadlines live in the store as absolute times (auto_stop_at, and
// last_activity_at + idle_minutes), so a restarted sbxd finds the same
// ones; only activity leases, held by a request in progress (an attached
// exec or output stream, a file transfer), live in memory: a leased
// sandbox is never idle. A pass reads the store, runs what is due through
// `stop` (the daemon gives SandboxDriver::stop, the API's own code path),
// and one steady_timer on the io_context is re-armed to the earliest
// deadline left. Tests drive passes with run_due() and a fake clock.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

enum class LifecycleAction { AutoStop, IdlePause };

struct Deadline {
    std::string sandbox_id;
    LifecycleAction action = LifecycleAction::AutoStop;
    UnixMillis at = 0;
    bool operator==(const Deadline&) const = default;
};

struct LifecycleConfig {
    // How long one idle minute lasts; shorter only in tests (sbxd
    // --idle-minute-seconds).
    std::chrono::milliseconds idle_minute{60'000};
    // The longest the timer sleeps between passes: a deadline nobody
    // announced with reschedule() is still met this late at worst.
    std::chrono::milliseconds max_sleep{60'000};
    // After a failed stop, the sandbox's deadlines wait this long.
    std::chrono::milliseconds retry_after{10'000};
};

// The deadlines of one sandbox: the auto-stop while it runs or is paused,
// the idle pause while it runs with no lease held; earliest first.
[[nodiscard]] std::vector<Deadline> deadlines_of(const SandboxRecord& sandbox,
                                                 std::chrono::milliseconds idle_minute, bool leased);

class LifecycleScheduler {
public:
    // Stops the sandbox for the action: with memory, ending stopped
    // (AutoStop) or paused (IdlePause).
    using Stop = std::function<Result<void>(const std::string& id, LifecycleAction action)>;
    using Clock = std::function<UnixMillis()>;
    // Runs blocking work (a pass) off the io_context's thread.
    using Post = std::function<void(std::function<void()>)>;

    LifecycleScheduler(Store& store, Stop stop, LifecycleConfig config, Clock clock);
    ~LifecycleScheduler();
    LifecycleScheduler(const LifecycleScheduler&) = delete;
    LifecycleScheduler& operator=(const LifecycleScheduler&) = delete;

    // Held while a request uses the guest; released, it counts as
    // activity and the idle time starts again.
    class Lease {
    public:
        Lease() = default;
        Lease(LifecycleScheduler* owner, std::string id) : owner_(owner), id_(std::move(id)) {}
        Lease(Lease&& other) noexcept
            : owner_(std::exchange(other.owner_, nullptr)), id_(std::move(other.id_)) {}
        Lease& operator=(Lease&& other) noexcept;
        Lease(const Lease&) = delete;
        Lease& operator=(const Lease&) = delete;
        ~Lease() { release(); }
        void release();

    private:
        LifecycleScheduler* owner_ = nullptr;
        std::string id_;
    };

    // Activity on the sandbox now: its lastActivityAt moves here.
    void touch(const std::string& id);
    [[nodiscard]] Lease lease(const std::string& id);
    [[nodiscard]] bool leased(const std::string& id) const;

    // Every deadline the store gives now, earliest first.
    [[nodiscard]] Result<std::vector<Deadline>> deadlines() const;
    // One pass on the calling thread: each deadline due by now, checked
    // again against the store just before, goes to `stop`. Returns those
    // acted on (whether or not the stop succeeded; a failed one waits
    // retry_after). Nothing while another pass runs.
    std::vector<Deadline> run_due();

    // From now on passes run on `post`, woken by a timer on `io`.
    void start(boost::asio::io_context& io, Post post);
    // A deadline may have come earlier (a create, resume, renewal, a lease
    // released): re-arm the timer. Any thread; nothing before start().
    void reschedule();

private:
    void release(const std::string& id);
    // On the io_context's thread.
    void arm(std::optional<UnixMillis> at);
    void pass();
    std::vector<Deadline> run_due_locked();

    Store& store_;
    Stop stop_;
    LifecycleConfig config_;
    Clock clock_;
    mutable std::mutex leases_mutex_;
    std::map<std::string, int> leases_;
    std::map<std::string, UnixMillis> retry_at_;  // by sandbox, after a failed stop
    std::mutex pass_mutex_;                       // one pass at a time
    std::mutex arm_mutex_;  // arms reach the io_context in the order their deadlines were read
    boost::asio::io_context* io_ = nullptr;
    Post post_;
    std::unique_ptr<boost::asio::steady_timer> timer_;
};

[[nodiscard]] std::string_view to_string(LifecycleAction action);

}  // namespace sbx::sbxd

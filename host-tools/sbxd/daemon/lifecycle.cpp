#include "host-tools/sbxd/daemon/lifecycle.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>

#include "base/log.hpp"

namespace sbx::sbxd {

namespace asio = boost::asio;

std::string_view to_string(LifecycleAction action) {
    return action == LifecycleAction::AutoStop ? "auto_stop" : "idle";
}

std::vector<Deadline> deadlines_of(const SandboxRecord& s, std::chrono::milliseconds idle_minute,
                                   bool leased) {
    std::vector<Deadline> out;
    const bool running = s.state == SandboxState::Running;
    if (s.auto_stop_at && (running || s.state == SandboxState::Paused)) {
        out.push_back({s.id, LifecycleAction::AutoStop, *s.auto_stop_at});
    }
    if (running && s.idle_minutes && *s.idle_minutes > 0 && !leased) {
        out.push_back(
            {s.id, LifecycleAction::IdlePause, s.last_activity_at + *s.idle_minutes * idle_minute.count()});
    }
    // On a tie the auto-stop goes first; the idle pause then finds it stopped.
    std::stable_sort(out.begin(), out.end(),
                     [](const Deadline& a, const Deadline& b) { return a.at < b.at; });
    return out;
}

LifecycleScheduler::LifecycleScheduler(Store& store, Stop stop, LifecycleConfig config, Clock clock)
    : store_(store), stop_(std::move(stop)), config_(config), clock_(std::move(clock)) {}

LifecycleScheduler::~LifecycleScheduler() = default;

LifecycleScheduler::Lease& LifecycleScheduler::Lease::operator=(Lease&& other) noexcept {
    if (this != &other) {
        release();
        owner_ = std::exchange(other.owner_, nullptr);
        id_ = std::move(other.id_);
    }
    return *this;
}

void LifecycleScheduler::Lease::release() {
    if (owner_ != nullptr) {
        std::exchange(owner_, nullptr)->release(id_);
    }
}

void LifecycleScheduler::touch(const std::string& id) {
    if (auto touched = store_.touch(id, clock_()); !touched && touched.error().code != "not_found") {
        log::warn("sandbox {}: recording activity: {}", id, touched.error().to_string());
    }
}

LifecycleScheduler::Lease LifecycleScheduler::lease(const std::string& id) {
    {
        std::lock_guard lock(leases_mutex_);
        ++leases_[id];
    }
    touch(id);
    return Lease(this, id);
}

bool LifecycleScheduler::leased(const std::string& id) const {
    std::lock_guard lock(leases_mutex_);
    return leases_.contains(id);
}

void LifecycleScheduler::release(const std::string& id) {
    {
        std::lock_guard lock(leases_mutex_);
        if (auto it = leases_.find(id); it != leases_.end() && --it->second <= 0) {
            leases_.erase(it);
        }
    }
    touch(id);
    // Its idle deadline is back, maybe before the one the timer waits for.
    reschedule();
}

Result<std::vector<Deadline>> LifecycleScheduler::deadlines() const {
    auto sandboxes = store_.list_sandboxes({{}, {SandboxState::Running, SandboxState::Paused}});
    if (!sandboxes) {
        return sandboxes.error();
    }
    std::vector<Deadline> out;
    for (const auto& s : *sandboxes) {
        auto mine = deadlines_of(s, config_.idle_minute, leased(s.id));
        std::lock_guard lock(leases_mutex_);
        for (auto& d : mine) {
            if (auto retry = retry_at_.find(s.id); retry != retry_at_.end()) {
                d.at = std::max(d.at, retry->second);
            }
        }
        out.insert(out.end(), mine.begin(), mine.end());
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Deadline& a, const Deadline& b) { return a.at < b.at; });
    return out;
}

std::vector<Deadline> LifecycleScheduler::run_due() {
    std::unique_lock pass(pass_mutex_, std::try_to_lock);
    if (!pass.owns_lock()) {
        return {};
    }
    return run_due_locked();
}

std::vector<Deadline> LifecycleScheduler::run_due_locked() {
    auto all = deadlines();
    if (!all) {
        log::warn("lifecycle timers: {}", all.error().to_string());
        return {};
    }
    std::vector<Deadline> done;
    for (const auto& due : *all) {
        if (due.at > clock_()) {
            break;
        }
        // The store again: a request, a renewal or another deadline of
        // this pass may have changed it since.
        auto now = store_.get_sandbox(due.sandbox_id);
        if (!now) {
            continue;
        }
        auto again = deadlines_of(*now, config_.idle_minute, leased(due.sandbox_id));
        if (std::find_if(again.begin(), again.end(), [&](const Deadline& d) {
                return d.action == due.action && d.at <= clock_();
            }) == again.end()) {
            continue;
        }
        log::info("sandbox {}: {} deadline reached", due.sandbox_id, to_string(due.action));
        auto stopped = stop_(due.sandbox_id, due.action);
        std::lock_guard lock(leases_mutex_);
        if (stopped) {
            retry_at_.erase(due.sandbox_id);
        } else {
            // Another operation holds the sandbox, or the stop failed: not
            // again at once.
            retry_at_[due.sandbox_id] = clock_() + config_.retry_after.count();
            log::warn("sandbox {}: {}: {}", due.sandbox_id, to_string(due.action),
                      stopped.error().to_string());
        }
        done.push_back(due);
    }
    return done;
}

void LifecycleScheduler::start(asio::io_context& io, Post post) {
    io_ = &io;
    post_ = std::move(post);
    timer_ = std::make_unique<asio::steady_timer>(io);
    reschedule();
}

void LifecycleScheduler::reschedule() {
    if (io_ == nullptr) {
        return;
    }
    post_([this] {
        std::lock_guard lock(arm_mutex_);
        std::optional<UnixMillis> at;
        if (auto all = deadlines(); !all) {
            log::warn("lifecycle timers: {}", all.error().to_string());
        } else if (!all->empty()) {
            at = all->front().at;
        }
        asio::post(*io_, [this, at] { arm(at); });
    });
}

void LifecycleScheduler::arm(std::optional<UnixMillis> at) {
    auto wait = config_.max_sleep;
    if (at) {
        wait = std::clamp(std::chrono::milliseconds(*at - clock_()), std::chrono::milliseconds(0),
                          config_.max_sleep);
    }
    timer_->expires_after(wait);  // cancels the wait armed before
    timer_->async_wait([this](boost::system::error_code ec) {
        if (!ec) {
            post_([this] { pass(); });
        }
    });
}

void LifecycleScheduler::pass() {
    {
        std::unique_lock pass(pass_mutex_, std::try_to_lock);
        if (!pass.owns_lock()) {
            return;  // the pass in progress re-arms when it ends
        }
        (void)run_due_locked();
    }
    reschedule();
}

}  // namespace sbx::sbxd

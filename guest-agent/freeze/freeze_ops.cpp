// The freeze and thaw ops (docs/agent-protocol.md, "freeze, thaw"): before
// the host saves a guest's memory or stops it, every writable file system
// on the guest's disks is frozen (FIFREEZE: dirty data written, the
// journal flushed and its needs_recovery flag cleared, new writes held),
// so the disk alone holds every write the guest made and the host can read
// it while the guest is stopped; after a resume, thaw lets writes go on.
#include "base/log.hpp"
#include "guest-agent/agent/agent.hpp"
#include "guest-agent/freeze/freeze_state.hpp"

namespace sbx::agent {

FreezeState::FreezeState(std::shared_ptr<FreezeKernel> kernel)
    : kernel_(std::move(kernel)), watchdog_([this](const std::stop_token& stop) { watch(stop); }) {}

FreezeState::~FreezeState() {
    watchdog_.request_stop();
    if (watchdog_.joinable()) {
        watchdog_.join();
    }
}

void FreezeState::arm(Clock::time_point deadline) {
    std::lock_guard lock(mutex_);
    deadline_ = deadline;
    changed_.notify_all();
}

void FreezeState::disarm() {
    std::lock_guard lock(mutex_);
    deadline_.reset();
    changed_.notify_all();
}

unsigned FreezeState::watchdog_thaws() const {
    std::lock_guard lock(mutex_);
    return thaws_;
}

void FreezeState::watch(const std::stop_token& stop) {
    std::unique_lock lock(mutex_);
    while (!stop.stop_requested()) {
        if (!deadline_) {
            changed_.wait(lock, stop, [&] { return deadline_.has_value(); });
            continue;
        }
        const Clock::time_point deadline = *deadline_;
        if (changed_.wait_until(lock, stop, deadline, [&] { return deadline_ != deadline; })) {
            continue;  // disarmed or armed anew
        }
        if (stop.stop_requested()) {
            return;
        }
        deadline_.reset();
        lock.unlock();
        {
            std::lock_guard op(op_mutex_);
            auto thawed = thaw_all(*kernel_);
            log::warn("no thaw from the host in time: thawed the guest's file systems ({})",
                      thawed ? fmt::format("{} of them", thawed->size()) : thawed.error().to_string());
        }
        lock.lock();
        ++thaws_;
    }
}

namespace {

constexpr std::int64_t kDefaultTimeoutMs = 60'000;
constexpr std::int64_t kMinTimeoutMs = 100;
constexpr std::int64_t kMaxTimeoutMs = 600'000;

// A kernel call's failure with its own code (io_error, permission_denied).
Result<void> reply_error(Session& session, const Error& error) {
    return session.stream().write_message(
        error_message(error.code.empty() ? code::kIoError : std::string_view(error.code), error.to_string()));
}

Result<void> freeze(Session& session, const Json& request) {
    std::int64_t timeout_ms = kDefaultTimeoutMs;
    if (auto it = request.find("timeout_ms"); it != request.end() && !it->is_null()) {
        if (!it->is_number_integer() || it->get<std::int64_t>() < kMinTimeoutMs ||
            it->get<std::int64_t>() > kMaxTimeoutMs) {
            return session.stream().write_message(error_message(
                code::kBadRequest,
                fmt::format("\"timeout_ms\" must be an integer from {} to {}", kMinTimeoutMs, kMaxTimeoutMs)));
        }
        timeout_ms = it->get<std::int64_t>();
    }
    FreezeState& state = session.agent().freeze();
    std::lock_guard lock(state.mutex());
    auto frozen = freeze_all(state.kernel());
    if (!frozen) {
        return reply_error(session, frozen.error());
    }
    state.arm(FreezeState::Clock::now() + std::chrono::milliseconds(timeout_ms));
    return session.stream().write_message(Json{{"type", "result"}, {"frozen", *frozen}, {"timeout_ms", timeout_ms}});
}

Result<void> thaw(Session& session, const Json&) {
    FreezeState& state = session.agent().freeze();
    std::lock_guard lock(state.mutex());
    state.disarm();
    auto thawed = thaw_all(state.kernel());
    if (!thawed) {
        return reply_error(session, thawed.error());
    }
    return session.stream().write_message(Json{{"type", "result"}, {"thawed", *thawed}});
}

}  // namespace

void register_freeze_ops(OpTable& ops) {
    ops.emplace("freeze", freeze);
    ops.emplace("thaw", thaw);
}

}  // namespace sbx::agent

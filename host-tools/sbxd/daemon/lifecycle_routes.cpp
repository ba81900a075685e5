// The lifecycle routes (docs/api.md, "Auto-stop and idle pause"): a new
// auto-stop deadline or none, the idle pause's minutes; and the wake of a
// paused sandbox that a guest request needs (product.md §2). The timers
// themselves are lifecycle.hpp's.
#include <variant>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/views.hpp"

namespace sbx::sbxd {

namespace {

using http::Request;
using http::Response;

}  // namespace

void ApiService::reschedule() const {
    if (lifecycle_ != nullptr) {
        lifecycle_->reschedule();
    }
}

// A ttl, idle or egress change of one sandbox: refused while it is being
// deleted; the timers are re-armed and the changed row is the answer.
Response ApiService::change_settings(const Request& request, const std::string& id,
                                   const std::function<Result<void>(const SandboxRecord&)>& change) const {
    auto sandbox = store_.get_sandbox(id);
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    if (sandbox->state == SandboxState::Deleting) {
        return Response::error(
            make_coded_error(api::code::kInvalidState, "sandbox {} is being deleted", sandbox->id),
            request.request_id);
    }
    if (auto set = change(*sandbox); !set) {
        return Response::error(set.error(), request.request_id);
    }
    reschedule();
    auto changed = store_.get_sandbox(sandbox->id);
    if (!changed) {
        return Response::error(changed.error(), request.request_id);
    }
    return Response::ok({{"sandbox", sandbox_view(*changed)}}, request.request_id);
}

Response ApiService::ttl_sandbox(const Request& request, const PathParams& params) const {
    auto parsed = api::parse_ttl(request.body, info_.min_ttl_seconds);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    return change_settings(request, params.at("id"), [&](const SandboxRecord& sandbox) {
        const UnixMillis now = clock_();
        AutoStop next;
        if (!parsed->no_auto_stop) {
            const std::int64_t ttl =
                parsed->ttl_seconds.value_or(sandbox.ttl_seconds.value_or(api::kDefaultTtlSeconds));
            next = AutoStop{now + ttl * 1000, ttl};
        }
        return store_.set_auto_stop(sandbox.id, next, now);
    });
}

Response ApiService::idle_sandbox(const Request& request, const PathParams& params) const {
    auto parsed = api::parse_idle(request.body);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    return change_settings(request, params.at("id"), [&](const SandboxRecord& sandbox) {
        return store_.set_idle_minutes(sandbox.id, parsed->idle_minutes, clock_());
    });
}

Result<SandboxRecord> ApiService::restart_auto_stop(const SandboxRecord& sandbox) const {
    if (sandbox.ttl_seconds && sandbox.state == SandboxState::Running) {
        const UnixMillis now = clock_();
        if (auto set = store_.set_auto_stop(
                sandbox.id, AutoStop{now + *sandbox.ttl_seconds * 1000, sandbox.ttl_seconds}, now);
            !set) {
            return set.error();
        }
    }
    reschedule();
    return store_.get_sandbox(sandbox.id);
}

Result<void> ApiService::wake(const std::string& id) const {
    std::lock_guard lock(wake_mutex_);
    auto sandbox = store_.get_sandbox(id);
    if (!sandbox) {
        return sandbox.error();
    }
    if (sandbox->state != SandboxState::Paused) {
        return ok();  // woken meanwhile, or never paused: the driver says what it is
    }
    // Past its auto-stop it is as good as stopped, which a request never wakes.
    if (sandbox->auto_stop_at && *sandbox->auto_stop_at <= clock_()) {
        return make_coded_error(api::code::kInvalidState,
                                "sandbox {} is paused past its auto-stop deadline; resume it "
                                "(POST /v1/sandboxes/{}/resume)",
                                id, id);
    }
    std::optional<Admission::Decision> decision = admission_.admit(Demand{1, {{id, sandbox->memory_mib}}});
    if (const auto* no = std::get_if<Admission::Refusal>(&*decision)) {
        return no->error;
    }
    // The auto-stop keeps its deadline: a wake is no new lease of life.
    api::ResumeRequest resume;
    resume.reason = "wake";
    auto resumed = driver_.resume(id, resume);
    if (!resumed) {
        return resumed.error();
    }
    std::get<Admission::Ticket>(*decision).commit();
    reschedule();  // its idle time starts again from now
    return ok();
}

}  // namespace sbx::sbxd

#include "host-tools/sbxd/daemon/api_service.hpp"

#include <algorithm>
#include <chrono>
#include <variant>

#include "base/log.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/daemon/views.hpp"

namespace sbx::sbxd {

namespace {

using http::Request;
using http::Response;

// A sandbox-scoped key out of its sandbox.
Error forbidden(std::string_view what) {
    return make_coded_error(api::code::kForbidden, "this API key is scoped to one sandbox and cannot {}",
                            what);
}

// Idempotency-Key (product.md §5): 1-255 visible ASCII characters. The
// body's hash is of its parsed form, so that whitespace or key order do
// not make the same request look different; `scope` (a fork's parent)
// goes into the hash too.
Result<std::optional<IdempotencyClaim>> idempotency_claim(const Request& request,
                                                          std::string_view scope = {}) {
    std::string_view key = request.header("Idempotency-Key");
    if (key.empty()) {
        return std::optional<IdempotencyClaim>();
    }
    bool visible = std::all_of(key.begin(), key.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    if (key.size() > 255 || !visible) {
        return api::invalid_argument("Idempotency-Key must be 1-255 visible ASCII characters");
    }
    auto body = api::parse_body(request.body);
    if (!body) {
        return body.error();
    }
    return std::optional<IdempotencyClaim>(
        IdempotencyClaim{std::string(key), sha256_hex(std::string(scope) + body->dump())});
}

// A refusal of admission.hpp as the API's error; rate_limited carries
// Retry-After (RFC 9110 §10.2.3) and the same seconds in the body.
Response refused(const Admission::Refusal& refusal, std::string_view request_id) {
    Response response = Response::error(refusal.error, request_id);
    if (refusal.retry_after_seconds > 0) {
        auto body = nlohmann::json::parse(response.body);
        body["retryAfterSeconds"] = refusal.retry_after_seconds;
        response.body = body.dump();
        response.headers.emplace_back("Retry-After", std::to_string(refusal.retry_after_seconds));
    }
    return response;
}

// The ticket of an admitted start; empty when none was asked.
void commit(std::optional<Admission::Decision>& decision) {
    if (decision) {
        std::get<Admission::Ticket>(*decision).commit();
    }
}

Result<void> no_query(const Request& request) {
    if (!request.query.empty()) {
        return api::invalid_argument(
            fmt::format("unknown query parameter '{}'", request.query.front().first));
    }
    return ok();
}

}  // namespace

UnixMillis system_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

ApiService::ApiService(Store& store, SandboxDriver& driver, DaemonInfo info, Clock clock,
                       LifecycleScheduler* lifecycle)
    : store_(store),
      driver_(driver),
      info_(std::move(info)),
      clock_(std::move(clock)),
      started_at_(clock_()),
      admission_(
          AdmissionLimits{info_.limits.max_sandboxes, info_.limits.max_starts_per_minute,
                          info_.limits.memory_budget_mib},
          [this] { return usage(); }, clock_),
      lifecycle_(lifecycle),
      guest_(store, driver, clock_,
             GuestAccess{[this](const std::string& id) { return wake(id); }, lifecycle}) {
    add_routes();
}

void ApiService::add_routes() {
    // Health is for every caller that authenticated, scoped or not.
    router_.add("GET", "/v1/health",
                [this](const Request& request, const PathParams& params) { return health(request, params); });
    host_route("GET", "/v1/limits", &ApiService::limits);
    host_route("GET", "/v1/sandboxes", &ApiService::list_sandboxes);
    host_route("POST", "/v1/sandboxes", &ApiService::create_sandbox);
    host_route("DELETE", "/v1/sandboxes", &ApiService::delete_by_label);
    sandbox_route("GET", "/v1/sandboxes/{id}", &ApiService::get_sandbox);
    host_route("DELETE", "/v1/sandboxes/{id}", &ApiService::delete_sandbox);
    sandbox_route("POST", "/v1/sandboxes/{id}/stop", &ApiService::stop_sandbox);
    sandbox_route("POST", "/v1/sandboxes/{id}/resume", &ApiService::resume_sandbox);
    sandbox_route("POST", "/v1/sandboxes/{id}/ttl", &ApiService::ttl_sandbox);
    sandbox_route("POST", "/v1/sandboxes/{id}/idle", &ApiService::idle_sandbox);
    // Not a sandbox-scoped key's: a sandbox never lifts its own egress policy.
    host_route("POST", "/v1/sandboxes/{id}/egress", &ApiService::egress_sandbox);
    host_route("POST", "/v1/sandboxes/{id}/fork", &ApiService::fork_sandbox);
    host_route("POST", "/v1/sandboxes/{id}/snapshot", &ApiService::snapshot_sandbox);
    sandbox_route("GET", "/v1/sandboxes/{id}/history", &ApiService::history);
    sandbox_route("GET", "/v1/sandboxes/{id}/logs", &ApiService::sandbox_logs);
    host_route("GET", "/v1/snapshots", &ApiService::list_snapshots);
    host_route("GET", "/v1/snapshots/{name}", &ApiService::get_snapshot);
    host_route("DELETE", "/v1/snapshots/{name}", &ApiService::delete_snapshot);
    host_route("GET", "/v1/events", &ApiService::list_events);
    sandbox_route("POST", "/v1/sandboxes/{id}/ports", &ApiService::host_port);
    sandbox_route("GET", "/v1/sandboxes/{id}/ports", &ApiService::list_sandbox_ports);
    sandbox_route("DELETE", "/v1/sandboxes/{id}/ports/{port}", &ApiService::unhost_port);
    host_route("GET", "/v1/ports", &ApiService::list_ports);
    sandbox_route("POST", "/v1/sandboxes/{id}/desktop", &ApiService::start_desktop);
    sandbox_route("GET", "/v1/sandboxes/{id}/desktop", &ApiService::get_desktop);
    sandbox_route("POST", "/v1/sandboxes/{id}/desktop/actions", &ApiService::desktop_action);
    sandbox_route("GET", "/v1/sandboxes/{id}/desktop/screenshot", &ApiService::desktop_screenshot);
    host_route("GET", "/v1/ca", &ApiService::certificate_authority);
    // Host-wide keys only (a read-only one may list): a sandbox's key
    // never makes another key, nor sees or revokes any.
    host_route("POST", "/v1/keys", &ApiService::create_key);
    host_route("GET", "/v1/keys", &ApiService::list_keys);
    host_route("DELETE", "/v1/keys/{id}", &ApiService::delete_key);
    guest_.add_routes([this](std::string_view method, std::string_view pattern, http::Handler handler,
                             http::BodyMode body) { sandbox_route(method, pattern, std::move(handler), body); });
}

void ApiService::serve_mcp(http::Handler handler) {
    for (const char* method : {"POST", "GET", "DELETE"}) {
        // Streamed: the endpoint reads the body under its own limit, and a
        // long tool call holds a stream thread, not one of the few workers.
        router_.add(method, kMcpPath, handler, http::BodyMode::Streamed);
    }
}

void ApiService::host_route(std::string_view method, std::string_view pattern,
                            Response (ApiService::*handler)(const Request&, const PathParams&) const) {
    router_.add(method, pattern, [this, handler](const Request& request, const PathParams& params) {
        if (!request.principal.host_wide()) {
            return Response::error(forbidden("use host-wide routes"), request.request_id);
        }
        return (this->*handler)(request, params);
    });
}

void ApiService::sandbox_route(std::string_view method, std::string_view pattern,
                               Response (ApiService::*handler)(const Request&, const PathParams&) const) {
    sandbox_route(
        method, pattern,
        [this, handler](const Request& request, const PathParams& params) { return (this->*handler)(request, params); },
        http::BodyMode::Whole);
}

void ApiService::sandbox_route(std::string_view method, std::string_view pattern, http::Handler handler,
                               http::BodyMode body) {
    router_.add(
        method, pattern,
        [handler = std::move(handler)](const Request& request, const PathParams& params) {
            const auto& scope = request.principal.sandbox_id;
            if (scope && *scope != params.at("id")) {
                return Response::error(forbidden("reach other sandboxes"), request.request_id);
            }
            return handler(request, params);
        },
        body);
}

// Every request is logged with the key it came with ("unix": the socket's
// owner), whatever its answer.
Response ApiService::handle(Request request) const {
    Response response = authorize_and_dispatch(request);
    log::info("request {} {} {} key={} {}", request.request_id, request.method, request.path,
              request.principal.key().value_or("unix"), response.status);
    return response;
}

Response ApiService::authorize_and_dispatch(Request& request) const {
    if (request.transport != http::Transport::Unix) {
        auto principal = authenticate_bearer(store_, request.header("Authorization"), clock_());
        if (!principal) {
            Response response = Response::error(principal.error(), request.request_id);
            if (principal.error().code == api::code::kUnauthorized) {
                response.headers.emplace_back("WWW-Authenticate", "Bearer");  // RFC 6750 §3
            }
            return response;
        }
        request.principal = std::move(*principal);
    }
    // A read-only key reads: GET and HEAD (RFC 9110 §9.2.1, safe methods),
    // and no WebSocket, which carries exec input and TCP both ways.
    const bool reads = (request.method == "GET" || request.method == "HEAD") && !request.websocket;
    if (request.principal.read_only && !reads && request.path != kMcpPath) {
        return Response::error(make_coded_error(api::code::kForbidden, "this API key is read-only: {} {} changes "
                                                "something (only GET and HEAD, without WebSocket)",
                                                request.method, request.path),
                               request.request_id);
    }
    return router_.dispatch(request);
}

Response ApiService::health(const Request& request, const PathParams&) const {
    return Response::ok({{"host", info_.host_name},
                         {"version", info_.version},
                         {"uptimeSeconds", (clock_() - started_at_) / 1000},
                         {"schemaVersion", Store::latest_schema_version()}},
                        request.request_id);
}

Result<Usage> ApiService::usage() const {
    auto running = store_.list_sandboxes({{}, {SandboxState::Running, SandboxState::Stopping}});
    if (!running) {
        return running.error();
    }
    Usage u;
    for (const auto& s : *running) {
        u.memory_mib_by_id.emplace(s.id, s.memory_mib);
    }
    return u;
}

Response ApiService::limits(const Request& request, const PathParams&) const {
    auto now = admission_.report();
    if (!now) {
        return Response::error(now.error(), request.request_id);
    }
    const auto& l = info_.limits;
    nlohmann::json sizes = nlohmann::json::array();
    for (const auto& size : api::kSizes) {
        sizes.push_back({{"name", size.name},
                         {"cpus", std::min(size.cpus, l.host_cpus)},
                         {"memoryMib", std::min(size.memory_mib, l.max_memory_mib)}});
    }
    return Response::ok({{"limits",
                          {{"maxRunningSandboxes", l.max_sandboxes},
                           {"runningSandboxes", now->running},
                           {"maxStartsPerMinute", l.max_starts_per_minute},
                           {"startsLastMinute", now->starts_last_minute},
                           {"memoryBudgetMib", l.memory_budget_mib},
                           {"memoryInUseMib", now->memory_mib},
                           {"hostCpus", l.host_cpus},
                           {"hostMemoryMib", l.host_memory_mib},
                           {"maxMemoryMibPerSandbox", l.max_memory_mib},
                           {"minMemoryMibPerSandbox", l.min_memory_mib},
                           {"maxDiskGib", l.max_disk_gib},
                           {"defaultDiskGib", l.default_disk_gib},
                           {"sizes", sizes}}}},
                        request.request_id);
}

Response ApiService::list_sandboxes(const Request& request, const PathParams&) const {
    auto query = api::parse_list_query(request.query);
    if (!query) {
        return Response::error(query.error(), request.request_id);
    }
    auto sandboxes = store_.list_sandboxes({query->labels, query->states});
    if (!sandboxes) {
        return Response::error(sandboxes.error(), request.request_id);
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& s : *sandboxes) {
        list.push_back(sandbox_view(s));
    }
    return Response::ok({{"sandboxes", list}}, request.request_id);
}

Response ApiService::create_sandbox(const Request& request, const PathParams&) const {
    auto parsed = api::parse_create(request.body, info_.min_ttl_seconds);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    // From a named snapshot, its machine unless the request names one: the
    // memory restores only on the same one.
    api::CreateRequest shaped = *parsed;
    if (parsed->from) {
        if (auto snapshot = store_.get_snapshot(*parsed->from); snapshot) {
            if (!shaped.size && !shaped.cpus && !shaped.memory_mib && snapshot->cpus > 0) {
                shaped.cpus = snapshot->cpus;
                shaped.memory_mib = snapshot->memory_mib;
            }
            if (!shaped.disk_gib) {
                shaped.disk_gib = snapshot->disk_gib;
            }
        }
    }
    auto shape = api::resolve_shape(shaped, info_.limits);
    if (!shape) {
        return Response::error(shape.error(), request.request_id);
    }
    auto claim = idempotency_claim(request);
    if (!claim) {
        return Response::error(claim.error(), request.request_id);
    }
    // A replay is no start: answered before admission.
    if (*claim) {
        auto earlier = store_.find_create_claim(**claim, clock_());
        if (!earlier) {
            return Response::error(earlier.error(), request.request_id);
        }
        if (*earlier) {
            return Response::ok({{"sandbox", sandbox_view(**earlier)},
                                 {"replayed", true},
                                 {"warnings", nlohmann::json::array()}},
                                request.request_id, 200);
        }
    }
    auto id = new_sandbox_id();
    if (!id) {
        return Response::error(id.error().with_code(api::code::kInternal), request.request_id);
    }
    std::optional<Admission::Decision> decision = admission_.admit(Demand{1, {{*id, shape->memory_mib}}});
    if (const auto* no = std::get_if<Admission::Refusal>(&*decision)) {
        return refused(*no, request.request_id);
    }
    auto created = driver_.create(CreateSpec{*id, *parsed, *shape, *claim});
    if (!created) {
        return Response::error(created.error(), request.request_id);
    }
    SandboxRecord sandbox = created->sandbox;
    if (!created->replayed) {
        commit(decision);
        // The deadline counts from ready, not from the request: a cold boot
        // can take longer than a short ttl.
        auto started = restart_auto_stop(sandbox);
        if (!started) {
            return Response::error(started.error(), request.request_id);
        }
        sandbox = *started;
    }
    std::vector<std::string> warnings = shape->warnings;
    warnings.insert(warnings.end(), created->warnings.begin(), created->warnings.end());
    nlohmann::json body = {{"sandbox", sandbox_view(sandbox)},
                           {"replayed", created->replayed},
                           {"warnings", warnings}};
    if (created->memory_restored) {
        body["memoryRestored"] = *created->memory_restored;
        if (!*created->memory_restored) {
            body["startReason"] = created->start_reason;
        }
    }
    return Response::ok(std::move(body), request.request_id, created->replayed ? 200 : 201);
}

Response ApiService::get_sandbox(const Request& request, const PathParams& params) const {
    if (auto q = no_query(request); !q) {
        return Response::error(q.error(), request.request_id);
    }
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    return Response::ok({{"sandbox", sandbox_view(*sandbox)}}, request.request_id);
}

Response ApiService::delete_sandbox(const Request& request, const PathParams& params) const {
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    if (auto removed = driver_.remove(sandbox->id); !removed) {
        return Response::error(removed.error(), request.request_id);
    }
    return Response::ok({{"deleted", {sandbox->id}}}, request.request_id);
}

// DELETE /v1/sandboxes?labels=k=v[,k2=v2][&state=...][&dryRun=true]:
// labels are required, so that no request deletes every sandbox.
Response ApiService::delete_by_label(const Request& request, const PathParams&) const {
    bool dry_run = false;
    http::Pairs selectors;
    for (const auto& [key, value] : request.query) {
        if (key != "dryRun") {
            selectors.emplace_back(key, value);
        } else if (value == "true" || value == "false") {
            dry_run = value == "true";
        } else {
            return Response::error(api::invalid_argument("dryRun must be true or false"), request.request_id);
        }
    }
    auto query = api::parse_list_query(selectors);
    if (!query) {
        return Response::error(query.error(), request.request_id);
    }
    if (query->labels.empty()) {
        return Response::error(
            api::invalid_argument("labels is required (labels=k=v[,k2=v2]): a DELETE of /v1/sandboxes "
                                  "never deletes every sandbox"),
            request.request_id);
    }
    auto matching = store_.list_sandboxes({query->labels, query->states});
    if (!matching) {
        return Response::error(matching.error(), request.request_id);
    }
    nlohmann::json deleted = nlohmann::json::array();
    nlohmann::json failed = nlohmann::json::array();
    for (const auto& s : *matching) {
        if (dry_run) {
            deleted.push_back(s.id);
        } else if (auto removed = driver_.remove(s.id); removed) {
            deleted.push_back(s.id);
        } else {
            const api::ApiError e = api::to_api_error(removed.error());
            failed.push_back({{"id", s.id}, {"code", e.code}, {"message", e.message}});
        }
    }
    return Response::ok({{"deleted", deleted}, {"dryRun", dry_run}, {"failed", failed}}, request.request_id);
}

Response ApiService::stop_sandbox(const Request& request, const PathParams& params) const {
    auto parsed = api::parse_stop(request.body);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    auto stopped = driver_.stop(sandbox->id, *parsed);
    if (!stopped) {
        return Response::error(stopped.error(), request.request_id);
    }
    return Response::ok({{"sandbox", sandbox_view(*stopped)}}, request.request_id);
}

Response ApiService::resume_sandbox(const Request& request, const PathParams& params) const {
    auto parsed = api::parse_resume(request.body);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    // Only a resume the driver would start is admitted; others get its invalid_state.
    std::optional<Admission::Decision> decision;
    if (sandbox->state == SandboxState::Stopped || sandbox->state == SandboxState::Paused ||
        sandbox->state == SandboxState::Crashed) {
        int memory = sandbox->memory_mib;
        if (parsed->size) {
            api::CreateRequest shape_request;
            shape_request.size = *parsed->size;
            shape_request.disk_gib = sandbox->disk_gib;
            auto shape = api::resolve_shape(shape_request, info_.limits);
            if (!shape) {
                return Response::error(shape.error(), request.request_id);
            }
            memory = shape->memory_mib;
        }
        decision = admission_.admit(Demand{1, {{sandbox->id, memory}}});
        if (const auto* no = std::get_if<Admission::Refusal>(&*decision)) {
            return refused(*no, request.request_id);
        }
    }
    auto resumed = driver_.resume(sandbox->id, *parsed);
    if (!resumed) {
        return Response::error(resumed.error(), request.request_id);
    }
    commit(decision);
    auto renewed = restart_auto_stop(resumed->sandbox);
    if (!renewed) {
        return Response::error(renewed.error(), request.request_id);
    }
    nlohmann::json fields = {{"sandbox", sandbox_view(*renewed)},
                             {"memoryRestored", resumed->memory_restored}};
    if (!resumed->memory_restored) {
        fields["resumeReason"] = resumed->resume_reason;
    }
    return Response::ok(std::move(fields), request.request_id);
}

Response ApiService::fork_sandbox(const Request& request, const PathParams& params) const {
    auto parsed = api::parse_fork(request.body);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    // The parent is part of the request: the same key and body on another
    // parent is a conflict.
    auto claim = idempotency_claim(request, "fork " + sandbox->id + " ");
    if (!claim) {
        return Response::error(claim.error(), request.request_id);
    }
    auto reply = [&](const std::vector<SandboxRecord>& children, bool replayed) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& child : children) {
            list.push_back(sandbox_view(child));
        }
        return Response::ok({{"sandboxes", list}, {"replayed", replayed}}, request.request_id,
                            replayed ? 200 : 201);
    };
    if (*claim) {
        auto earlier = store_.find_fork_claim(**claim, clock_());
        if (!earlier) {
            return Response::error(earlier.error(), request.request_id);
        }
        if (!earlier->empty()) {
            return reply(*earlier, true);
        }
    }
    // Each child is a start; a running parent stops and restarts inside the
    // fork, so its slot is held meanwhile. Forks the driver refuses
    // (invalid_state) are not admitted.
    const bool running = sandbox->state == SandboxState::Running;
    const bool stopped = sandbox->state == SandboxState::Stopped || sandbox->state == SandboxState::Paused;
    std::optional<Admission::Decision> decision;
    std::vector<std::string> child_ids;
    for (int i = 0; i < parsed->count; ++i) {
        auto id = new_sandbox_id();
        if (!id) {
            return Response::error(id.error().with_code(api::code::kInternal), request.request_id);
        }
        child_ids.push_back(std::move(*id));
    }
    if (running || (stopped && !parsed->memory)) {
        Demand demand{parsed->count, {}};
        for (const auto& id : child_ids) {
            demand.slots.push_back({id, sandbox->memory_mib});
        }
        if (running) {
            demand.slots.push_back({sandbox->id, sandbox->memory_mib});
        }
        decision = admission_.admit(demand);
        if (const auto* no = std::get_if<Admission::Refusal>(&*decision)) {
            return refused(*no, request.request_id);
        }
    }
    auto children = driver_.fork(sandbox->id, *parsed, *claim, child_ids);
    if (!children) {
        return Response::error(children.error(), request.request_id);
    }
    commit(decision);
    std::vector<SandboxRecord> started;
    for (const auto& child : *children) {
        auto restarted = restart_auto_stop(child);
        started.push_back(restarted ? *restarted : child);
    }
    return reply(started, false);
}

Response ApiService::snapshot_sandbox(const Request& request, const PathParams& params) const {
    auto parsed = api::parse_snapshot(request.body);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    // A running sandbox stops and restarts inside the snapshot (as a memory
    // fork's parent): its slot is held meanwhile. No start is counted.
    std::optional<Admission::Decision> held;
    if (sandbox->state == SandboxState::Running) {
        held = admission_.admit(Demand{0, {{sandbox->id, sandbox->memory_mib}}});
        if (const auto* no = std::get_if<Admission::Refusal>(&*held)) {
            return refused(*no, request.request_id);
        }
    }
    auto snapshot = driver_.snapshot(sandbox->id, *parsed);
    if (!snapshot) {
        return Response::error(snapshot.error(), request.request_id);
    }
    return Response::ok({{"snapshot", snapshot_json(*snapshot)}}, request.request_id, 201);
}

}  // namespace sbx::sbxd

// The lifecycle routes and wake on request, over a real store and a
// driver that only moves states: validation, what the store keeps, and
// which requests resume a paused sandbox.
#include <doctest/doctest.h>

#include <algorithm>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/testing/api_fixture.hpp"
#include "host-tools/sbxd/testing/temp_dir.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using nlohmann::json;

namespace {

constexpr UnixMillis kT0 = 1'700'000'000'000;

// Resumes and stops as the VMM driver does to the store; the agent of a
// running sandbox is a socket nobody listens on.
struct StateDriver final : SandboxDriver {
    Store* store = nullptr;
    std::vector<std::string> resume_reasons;
    // As sandbox_record() does: the deadline from the request's time.
    Result<CreateOutcome> create(const CreateSpec& spec) override {
        SandboxRecord s;
        s.id = "sbx_new";
        s.name = s.id;
        s.state = SandboxState::Running;
        s.from = "default";
        s.size = spec.shape.size;
        s.created_at = kT0;
        s.last_activity_at = kT0;
        s.ttl_seconds = spec.request.ttl_seconds.value_or(api::kDefaultTtlSeconds);
        s.auto_stop_at = kT0 + *s.ttl_seconds * 1000;
        return store->create_sandbox(s, spec.claim);
    }
    Result<SandboxRecord> stop(const std::string&, const api::StopRequest&) override {
        return make_coded_error("internal", "unused");
    }
    Result<ResumeOutcome> resume(const std::string& id, const api::ResumeRequest& request) override {
        resume_reasons.push_back(request.reason);
        auto creating = store->change_state(id, {SandboxState::Creating, 0, std::nullopt, request.reason});
        if (!creating) {
            return creating.error();
        }
        auto running = store->change_state(id, {SandboxState::Running, kT0 + 5000, std::nullopt});
        if (!running) {
            return running.error();
        }
        return ResumeOutcome{*running, true, ""};
    }
    Result<std::vector<SandboxRecord>> fork(const std::string&, const api::ForkRequest&,
                                            const std::optional<IdempotencyClaim>&,
                                            const std::vector<std::string>&) override {
        return make_coded_error("internal", "unused");
    }
    Result<void> remove(const std::string&) override { return ok(); }
    Result<SnapshotRecord> snapshot(const std::string&, const api::SnapshotRequest&) override {
        return make_coded_error("internal", "unused");
    }
    Result<void> remove_snapshot(const std::string&) override { return ok(); }
    Result<AgentAddress> agent(const std::string& id) override {
        auto s = store->get_sandbox(id);
        if (!s || s->state != SandboxState::Running) {
            return make_coded_error("invalid_state", "not running");
        }
        return AgentAddress{"/nonexistent/sbxd-test.vsock", "token"};
    }
    Result<std::string> disk(const std::string&) override {
        return make_coded_error("invalid_state", "no disk");
    }
    Result<std::string> console_log(const std::string&) override {
        return std::string("/nonexistent/console.log");
    }
};

struct Fixture {
    testing::TempDir dir{"sbxd-lifecycle-api"};
    std::unique_ptr<Store> store = testing::open_store(dir.db());
    StateDriver driver;
    UnixMillis now = kT0;
    std::unique_ptr<LifecycleScheduler> lifecycle;
    std::unique_ptr<ApiService> service;

    explicit Fixture(std::int64_t min_ttl_seconds = api::kMinTtlSeconds) {
        driver.store = store.get();
        api::HostLimits limits;
        limits.host_cpus = 2;
        limits.max_memory_mib = 4096;
        limits.memory_budget_mib = 1 << 20;
        DaemonInfo info{"host-a", "test", "/images", limits};
        info.min_ttl_seconds = min_ttl_seconds;
        auto clock = [this] { return now; };
        lifecycle = std::make_unique<LifecycleScheduler>(
            *store, [](const std::string&, LifecycleAction) -> Result<void> { return ok(); },
            LifecycleConfig{}, clock);
        service = std::make_unique<ApiService>(*store, driver, info, clock, lifecycle.get());
        for (const auto& [id, state] : {std::pair{"sbx_run", SandboxState::Running},
                                        {"sbx_paused", SandboxState::Paused},
                                        {"sbx_stopped", SandboxState::Stopped}}) {
            SandboxRecord s;
            s.id = id;
            s.name = id;
            s.state = state;
            s.from = "default";
            s.size = "small";
            s.memory_mib = 1024;
            s.created_at = kT0;
            s.started_at = kT0;
            s.last_activity_at = kT0;
            s.ttl_seconds = 600;
            s.auto_stop_at = kT0 + 600'000;
            REQUIRE(store->create_sandbox(s, std::nullopt).has_value());
        }
    }

    http::Response call(std::string method, std::string target, std::string body = {},
                        http::Transport transport = http::Transport::Unix, http::Pairs headers = {}) const {
        return service->handle(
            testing::api_request(std::move(method), target, std::move(body), std::move(headers), transport));
    }
    SandboxRecord sandbox(const std::string& id) const { return store->get_sandbox(id).value(); }
};

json body_of(const http::Response& response) {
    return json::parse(response.body);
}

}  // namespace

TEST_CASE("POST ttl renews from now, with the sandbox's own length when none is given, or turns it off") {
    Fixture f;
    f.now = kT0 + 100'000;
    auto renewed = f.call("POST", "/v1/sandboxes/sbx_run/ttl", R"({"ttl":7200})");
    REQUIRE(renewed.status == 200);
    CHECK(body_of(renewed)["sandbox"]["autoStopAt"] == "2023-11-15T00:15:00.000Z");
    CHECK(body_of(renewed)["sandbox"]["ttlSeconds"] == 7200);
    CHECK(f.sandbox("sbx_run").auto_stop_at == f.now + 7'200'000);

    f.now += 1000;
    REQUIRE(f.call("POST", "/v1/sandboxes/sbx_run/ttl").status == 200);
    CHECK(f.sandbox("sbx_run").auto_stop_at == f.now + 7'200'000);

    auto off = f.call("POST", "/v1/sandboxes/sbx_run/ttl", R"({"noAutoStop":true})");
    REQUIRE(off.status == 200);
    CHECK(body_of(off)["sandbox"]["autoStopAt"].is_null());
    CHECK(body_of(off)["sandbox"]["ttlSeconds"].is_null());
    REQUIRE(f.call("POST", "/v1/sandboxes/sbx_run/ttl", "{}").status == 200);
    CHECK(f.sandbox("sbx_run").ttl_seconds == api::kDefaultTtlSeconds);  // off had no length: the default

    auto events = f.store->list_events(0, 100).value();
    CHECK(events.back().type == "auto_stop");
}

TEST_CASE("POST ttl refuses what the API refuses, with its codes") {
    Fixture f;
    auto short_ttl = f.call("POST", "/v1/sandboxes/sbx_run/ttl", R"({"ttl":30})");
    CHECK(short_ttl.status == 400);
    CHECK(body_of(short_ttl)["code"] == "invalid_argument");
    CHECK(body_of(short_ttl)["ok"] == false);
    CHECK(body_of(short_ttl)["requestId"] == "req_test");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_run/ttl", R"({"ttl":"1h"})"))["code"] ==
          "invalid_argument");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_run/ttl", R"({"ttl":600,"noAutoStop":true})"))["code"] ==
          "invalid_argument");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_run/ttl", "[1]"))["code"] == "bad_request");
    CHECK(f.call("POST", "/v1/sandboxes/sbx_none/ttl", R"({"ttl":600})").status == 404);
    CHECK(f.call("GET", "/v1/sandboxes/sbx_run/ttl").status == 405);
    CHECK(f.sandbox("sbx_run").auto_stop_at == kT0 + 600'000);  // nothing changed

    Fixture test_scaled(1);  // sbxd --min-ttl-seconds 1
    CHECK(test_scaled.call("POST", "/v1/sandboxes/sbx_run/ttl", R"({"ttl":30})").status == 200);
    test_scaled.now = kT0 + 50'000;  // a cold boot longer than the ttl
    auto created = test_scaled.call("POST", "/v1/sandboxes", R"({"ttl":"20s"})");
    REQUIRE(created.status == 201);
    CHECK(test_scaled.sandbox("sbx_new").auto_stop_at == kT0 + 70'000);  // 20 s from ready
    CHECK(body_of(created)["sandbox"]["autoStopAt"] == "2023-11-14T22:14:30.000Z");
}

TEST_CASE("a key scoped to another sandbox cannot change its lifecycle") {
    Fixture f;
    auto key = make_api_key("scoped", std::string("sbx_paused"), kT0).value();
    REQUIRE(f.store->add_api_key(key.record).has_value());
    const http::Pairs auth = {{"Authorization", "Bearer " + key.secret}};
    CHECK(f.call("POST", "/v1/sandboxes/sbx_run/ttl", R"({"ttl":600})", http::Transport::Tcp, auth).status ==
          403);
    CHECK(f.call("POST", "/v1/sandboxes/sbx_run/idle", R"({"idleMinutes":5})", http::Transport::Tcp, auth)
              .status == 403);
    CHECK(f.call("POST", "/v1/sandboxes/sbx_paused/idle", R"({"idleMinutes":5})", http::Transport::Tcp, auth)
              .status == 200);
}

TEST_CASE("POST idle sets the minutes from now, 0 or null turns it off, the field is required") {
    Fixture f;
    f.now = kT0 + 50'000;
    auto set = f.call("POST", "/v1/sandboxes/sbx_run/idle", R"({"idleMinutes":5})");
    REQUIRE(set.status == 200);
    CHECK(body_of(set)["sandbox"]["idleMinutes"] == 5);
    CHECK(f.sandbox("sbx_run").last_activity_at == f.now);
    CHECK(body_of(set)["sandbox"]["lastActivityAt"] == "2023-11-14T22:14:10.000Z");
    REQUIRE(f.call("POST", "/v1/sandboxes/sbx_run/idle", R"({"idleMinutes":0})").status == 200);
    CHECK_FALSE(f.sandbox("sbx_run").idle_minutes);
    REQUIRE(f.call("POST", "/v1/sandboxes/sbx_run/idle", R"({"idleMinutes":5})").status == 200);
    REQUIRE(f.call("POST", "/v1/sandboxes/sbx_run/idle", R"({"idleMinutes":null})").status == 200);
    CHECK_FALSE(f.sandbox("sbx_run").idle_minutes);
    for (const char* bad : {"", "{}", R"({"idleMinutes":-1})", R"({"idleMinutes":43201})",
                            R"({"idleMinutes":"5"})", R"({"minutes":5})"}) {
        auto refused = f.call("POST", "/v1/sandboxes/sbx_run/idle", bad);
        CHECK(refused.status == 400);
        CHECK(body_of(refused)["code"] == "invalid_argument");
    }
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_none/idle", R"({"idleMinutes":5})"))["code"] ==
          "not_found");
}

TEST_CASE("a guest request wakes a paused sandbox; a stopped one stays stopped") {
    Fixture f;
    const std::string exec = R"({"command":["true"]})";
    auto woken = f.call("POST", "/v1/sandboxes/sbx_paused/exec", exec);
    // Woken, then the (fake) agent is unreachable.
    CHECK(body_of(woken)["code"] == "agent_unavailable");
    CHECK(f.driver.resume_reasons == std::vector<std::string>{"wake"});
    CHECK(f.sandbox("sbx_paused").state == SandboxState::Running);
    CHECK(f.sandbox("sbx_paused").auto_stop_at == kT0 + 600'000);  // a wake keeps the deadline
    auto events = f.store->list_events(0, 100).value();
    CHECK(std::any_of(events.begin(), events.end(), [](const EventRecord& e) {
        return e.data == R"({"from":"paused","reason":"wake","to":"creating"})";
    }));

    // Paused past its auto-stop (the timer not there yet): as good as stopped.
    REQUIRE(f.store->change_state("sbx_paused", {SandboxState::Stopping, f.now, std::nullopt}).has_value());
    REQUIRE(f.store->change_state("sbx_paused", {SandboxState::Paused, f.now, std::nullopt}).has_value());
    f.now = kT0 + 600'000;
    auto late = f.call("POST", "/v1/sandboxes/sbx_paused/exec", exec);
    CHECK(late.status == 409);
    CHECK(body_of(late)["code"] == "invalid_state");
    CHECK(f.driver.resume_reasons.size() == 1);
    CHECK(f.sandbox("sbx_paused").state == SandboxState::Paused);

    auto stopped = f.call("POST", "/v1/sandboxes/sbx_stopped/exec", exec);
    CHECK(stopped.status == 409);
    CHECK(body_of(stopped)["code"] == "invalid_state");
    CHECK(f.call("GET", "/v1/sandboxes/sbx_stopped/processes").status == 409);
    CHECK(f.driver.resume_reasons.size() == 1);
    CHECK(f.sandbox("sbx_stopped").state == SandboxState::Stopped);
}

TEST_CASE("a guest request counts as activity and its lease ends with it") {
    Fixture f;
    f.now = kT0 + 42'000;
    (void)f.call("GET", "/v1/sandboxes/sbx_run/processes");
    CHECK(f.sandbox("sbx_run").last_activity_at == kT0 + 42'000);
    CHECK_FALSE(f.lifecycle->leased("sbx_run"));
}

TEST_CASE("a user's resume starts the auto-stop again at its length") {
    Fixture f;
    f.now = kT0 + 900'000;  // past the old deadline
    auto resumed = f.call("POST", "/v1/sandboxes/sbx_stopped/resume");
    REQUIRE(resumed.status == 200);
    CHECK(f.sandbox("sbx_stopped").auto_stop_at == f.now + 600'000);
    CHECK(f.driver.resume_reasons == std::vector<std::string>{""});
}

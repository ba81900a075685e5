// The API service over a real store and a recording driver, without
// sockets: routing, scopes, selectors and what reaches the driver.
#include "host-tools/sbxd/daemon/api_service.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/testing/api_fixture.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using nlohmann::json;

namespace {

struct RecordingDriver final : SandboxDriver {
    Store* store = nullptr;
    bool create_ok = false;  // else the driver's own capacity_exceeded
    // When set, a create waits here (after saying it entered).
    std::shared_future<void> gate;
    std::atomic<bool> entered{false};
    std::optional<CreateSpec> last_create;
    std::optional<api::ForkRequest> last_fork;
    int forks = 0;
    std::vector<std::string> removed;
    Result<CreateOutcome> create(const CreateSpec& spec) override {
        last_create = spec;
        entered = true;
        if (gate.valid()) {
            gate.wait();
        }
        if (!create_ok) {
            return make_coded_error("capacity_exceeded", "no room");
        }
        SandboxRecord s;
        s.id = spec.id;
        s.name = s.id;
        s.from = "default";
        s.size = spec.shape.size;
        s.memory_mib = spec.shape.memory_mib;
        s.created_at = 1'700'000'000'000;  // the fixture's clock: the key's age
        auto created = store->create_sandbox(s, spec.claim);
        if (created) {
            created->memory_restored = memory_restored;
            created->start_reason = start_reason;
        }
        return created;
    }
    Result<SandboxRecord> stop(const std::string&, const api::StopRequest&) override {
        return make_coded_error("invalid_state", "not running");
    }
    Result<ResumeOutcome> resume(const std::string& id, const api::ResumeRequest&) override {
        SandboxRecord sandbox;
        sandbox.id = id;
        return ResumeOutcome{sandbox, false, "resized"};
    }
    // As the VMM driver does: each child recorded under the fork's key.
    Result<std::vector<SandboxRecord>> fork(const std::string& id, const api::ForkRequest& request,
                                            const std::optional<IdempotencyClaim>& claim,
                                            const std::vector<std::string>& child_ids) override {
        last_fork = request;
        ++forks;
        std::vector<SandboxRecord> children;
        for (int i = 0; i < request.count && store != nullptr; ++i) {
            SandboxRecord child = store->get_sandbox(id).value();
            child.id = child_ids.at(static_cast<std::size_t>(i));
            child.name = child.id;
            child.state = SandboxState::Creating;
            child.vmm.reset();
            REQUIRE(store->create_sandbox(child, std::nullopt).has_value());
            if (claim) {
                REQUIRE(store->add_fork_child(*claim, child.id, child.created_at).has_value());
            }
            children.push_back(child);
        }
        return children;
    }
    Result<void> remove(const std::string& id) override {
        removed.push_back(id);
        return ok();
    }
    // As the VMM driver does: the row in the store, refused for a used name.
    Result<SnapshotRecord> snapshot(const std::string& id, const api::SnapshotRequest& request) override {
        SnapshotRecord s{request.name, id, true, "default", 8, 5, 2, 1024, 4096, "AuthenticAMD/26/2/1/00ff"};
        if (auto added = store->add_snapshot(s); !added) {
            return added.error();
        }
        return s;
    }
    Result<void> remove_snapshot(const std::string& name) override {
        removed_snapshots.push_back(name);
        return store->remove_snapshot(name);
    }
    std::vector<std::string> removed_snapshots;
    std::optional<bool> memory_restored;
    std::string start_reason;
    Result<AgentAddress> agent(const std::string&) override {
        return make_coded_error("invalid_state", "not running");
    }
    std::string disk_path;  // what disk() gives for every sandbox
    Result<std::string> disk(const std::string&) override { return disk_path; }
    Result<std::string> console_log(const std::string&) override {
        return std::string("/nonexistent/console.log");
    }
};

struct Fixture {
    std::string dir;
    std::unique_ptr<Store> store;
    RecordingDriver driver;
    std::unique_ptr<ApiService> service;
    UnixMillis now = 1'700'000'000'000;

    explicit Fixture(const std::function<void(api::HostLimits&)>& tune = {}) {
        std::string templ = (std::filesystem::temp_directory_path() / "sbxd-api-XXXXXX").string();
        REQUIRE(::mkdtemp(templ.data()) != nullptr);
        dir = templ;
        store = std::move(Store::open(dir + "/sbxd.db").value());
        api::HostLimits limits;
        limits.host_cpus = 2;
        limits.max_memory_mib = 4096;
        limits.memory_budget_mib = 1 << 20;
        if (tune) {
            tune(limits);
        }
        driver.store = store.get();
        service = std::make_unique<ApiService>(
            *store, driver, DaemonInfo{"host-a", "test", "/images", limits}, [this] { return now; });
        for (const auto& [id, owner] : {std::pair{"sbx_1", "alice"}, {"sbx_2", "bob"}}) {
            SandboxRecord s;
            s.id = id;
            s.name = id;
            s.from = "default";
            s.size = "small";
            s.labels = {{"owner", owner}};
            s.memory_mib = 1024;
            s.env = {{"SECRET", "hunter2"}};
            s.created_at = 1'700'000'000'000;
            s.last_activity_at = s.created_at;
            REQUIRE(store->create_sandbox(s, std::nullopt).has_value());
        }
    }
    ~Fixture() { std::filesystem::remove_all(dir); }

    // creating -> running, or on to stopped.
    void run(const std::string& id) const {
        REQUIRE(store->change_state(id, {SandboxState::Running, now, std::nullopt}).has_value());
    }
    void stop(const std::string& id) const {
        REQUIRE(store->change_state(id, {SandboxState::Stopping, now, std::nullopt}).has_value());
        REQUIRE(store->change_state(id, {SandboxState::Stopped, now, std::nullopt}).has_value());
    }

    http::Response call(std::string method, std::string target, std::string body = {},
                        http::Pairs headers = {}, http::Transport transport = http::Transport::Unix) const {
        return service->handle(
            testing::api_request(std::move(method), target, std::move(body), std::move(headers), transport));
    }
};

json body_of(const http::Response& response) {
    return json::parse(response.body);
}

}  // namespace

TEST_CASE("list and get read the store, with selectors, and never show env values") {
    Fixture f;
    auto all = f.call("GET", "/v1/sandboxes");
    CHECK(all.status == 200);
    CHECK(body_of(all)["sandboxes"].size() == 2);
    auto alice = body_of(f.call("GET", "/v1/sandboxes?labels=owner%3Dalice"));
    REQUIRE(alice["sandboxes"].size() == 1);
    const json& s = alice["sandboxes"][0];
    CHECK(s["id"] == "sbx_1");
    CHECK(s["host"] == "host-a");
    CHECK(s["state"] == "creating");
    CHECK(s["envNames"] == json::array({"SECRET"}));
    CHECK(s["createdAt"] == "2023-11-14T22:13:20.000Z");
    CHECK(all.body.find("hunter2") == std::string::npos);
    CHECK(body_of(f.call("GET", "/v1/sandboxes?state=running"))["sandboxes"].empty());

    auto one = f.call("GET", "/v1/sandboxes/sbx_2");
    CHECK(one.status == 200);
    CHECK(body_of(one)["sandbox"]["labels"]["owner"] == "bob");
    CHECK(f.call("GET", "/v1/sandboxes/sbx_9").status == 404);
    CHECK(f.call("GET", "/v1/sandboxes/").status == 404);
}

TEST_CASE("create hands the validated shape and the idempotency claim to the driver") {
    Fixture f;
    auto r = f.call("POST", "/v1/sandboxes", R"({"size":"large", "labels":{"run":"7"}})",
                    {{"idempotency-key", "abc"}});
    CHECK(r.status == 503);
    CHECK(body_of(r)["code"] == "capacity_exceeded");
    REQUIRE(f.driver.last_create);
    CHECK(f.driver.last_create->shape.cpus == 2);  // large, scaled to the host
    CHECK(f.driver.last_create->shape.memory_mib == 4096);
    REQUIRE(f.driver.last_create->claim);
    CHECK(f.driver.last_create->claim->key == "abc");
    // The same request with other whitespace and key order hashes alike.
    auto first_hash = f.driver.last_create->claim->body_hash;
    (void)f.call("POST", "/v1/sandboxes", R"({"labels":{"run":"7"},"size":"large"})",
                 {{"Idempotency-Key", "abc"}});
    CHECK(f.driver.last_create->claim->body_hash == first_hash);
    (void)f.call("POST", "/v1/sandboxes", R"({"size":"small"})", {{"Idempotency-Key", "abc"}});
    CHECK(f.driver.last_create->claim->body_hash != first_hash);

    f.driver.last_create.reset();
    CHECK(f.call("POST", "/v1/sandboxes", R"({"cpus":3})").status == 400);
    CHECK(f.call("POST", "/v1/sandboxes", "{}", {{"Idempotency-Key", std::string(256, 'k')}}).status == 400);
    CHECK_FALSE(f.driver.last_create);  // refused before the driver
}

TEST_CASE("operations on a sandbox: 404 first, then the driver's answer") {
    Fixture f;
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_9/stop"))["code"] == "not_found");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/stop", R"({"memory":"no"})"))["code"] ==
          "invalid_argument");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/stop"))["code"] == "invalid_state");
    auto resumed = body_of(f.call("POST", "/v1/sandboxes/sbx_1/resume", R"({"size":"small"})"));
    CHECK(resumed["memoryRestored"] == false);
    CHECK(resumed["resumeReason"] == "resized");
    CHECK(f.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":3,"memory":false})").status == 201);
    CHECK(f.driver.last_fork->count == 3);
    CHECK_FALSE(f.driver.last_fork->memory);
    CHECK(body_of(f.call("DELETE", "/v1/sandboxes/sbx_1"))["deleted"] == json::array({"sbx_1"}));
    CHECK(f.call("POST", "/v1/sandboxes/sbx_1/snapshot", R"({"name":"Bad Name"})").status == 400);
}

TEST_CASE("TCP needs a key; a scoped key reaches only its own sandbox") {
    Fixture f;
    CHECK(f.call("GET", "/v1/health", {}, {}, http::Transport::Tcp).status == 401);
    auto host_key = make_api_key("admin", std::nullopt, 1).value();
    auto scoped_key = make_api_key("guest", "sbx_1", 1).value();
    REQUIRE(f.store->add_api_key(host_key.record).has_value());
    REQUIRE(f.store->add_api_key(scoped_key.record).has_value());
    auto as = [&](const NewApiKey& key, std::string method, std::string target) {
        return f.call(std::move(method), std::move(target), {}, {{"Authorization", "Bearer " + key.secret}},
                      http::Transport::Tcp);
    };
    CHECK(as(host_key, "GET", "/v1/sandboxes").status == 200);
    CHECK(as(host_key, "GET", "/v1/sandboxes/sbx_2").status == 200);
    CHECK(as(scoped_key, "GET", "/v1/health").status == 200);
    CHECK(as(scoped_key, "GET", "/v1/sandboxes/sbx_1").status == 200);
    CHECK(as(scoped_key, "GET", "/v1/sandboxes/sbx_1/history").status == 200);
    auto other = as(scoped_key, "GET", "/v1/sandboxes/sbx_2");
    CHECK(other.status == 403);
    CHECK(body_of(other)["code"] == "forbidden");
    CHECK(as(scoped_key, "GET", "/v1/sandboxes").status == 403);
    CHECK(as(scoped_key, "DELETE", "/v1/sandboxes/sbx_1").status == 403);
}

TEST_CASE("a read-only key reads and changes nothing; an expired or revoked key is 401") {
    Fixture f;
    auto viewer = make_api_key("viewer", std::nullopt, f.now, KeyLimits{true, std::nullopt}).value();
    auto brief = make_api_key("brief", std::nullopt, f.now, KeyLimits{false, f.now + 60'000}).value();
    auto revoked = make_api_key("gone", std::nullopt, f.now).value();
    for (const auto* key : {&viewer, &brief, &revoked}) {
        REQUIRE(f.store->add_api_key(key->record).has_value());
    }
    auto as = [&](const NewApiKey& key, std::string method, std::string target,
                  http::Pairs headers = {}) {
        headers.emplace_back("Authorization", "Bearer " + key.secret);
        return f.call(std::move(method), std::move(target), {}, std::move(headers), http::Transport::Tcp);
    };
    CHECK(as(viewer, "GET", "/v1/sandboxes").status == 200);
    CHECK(as(viewer, "GET", "/v1/sandboxes/sbx_1/history").status == 200);
    CHECK(as(viewer, "HEAD", "/v1/sandboxes/sbx_1").status != 403);
    for (auto [method, target] : {std::pair{"POST", "/v1/sandboxes"}, std::pair{"DELETE", "/v1/sandboxes/sbx_1"},
                                  std::pair{"POST", "/v1/sandboxes/sbx_1/stop"},
                                  std::pair{"PUT", "/v1/sandboxes/sbx_1/files/tmp/x"}}) {
        auto refused = as(viewer, method, target);
        CHECK_MESSAGE(refused.status == 403, method << " " << target);
        CHECK(body_of(refused)["code"] == "forbidden");
    }
    // A WebSocket handshake (the server marks it) is refused though it is a GET.
    auto handshake = testing::api_request("GET", "/v1/sandboxes/sbx_1/exec/ws", {},
                                          {{"Authorization", "Bearer " + viewer.secret}}, http::Transport::Tcp);
    handshake.websocket = true;
    CHECK(f.service->handle(std::move(handshake)).status == 403);

    CHECK(as(brief, "POST", "/v1/sandboxes/sbx_1/stop").status != 401);
    f.now += 60'000;  // the expiry itself refuses
    auto expired = as(brief, "GET", "/v1/sandboxes");
    CHECK(expired.status == 401);
    CHECK(body_of(expired)["message"].get<std::string>().find("expired") != std::string::npos);

    CHECK(as(revoked, "GET", "/v1/sandboxes").status == 200);
    REQUIRE(f.store->remove_api_key(revoked.record.id).has_value());
    CHECK(as(revoked, "GET", "/v1/sandboxes").status == 401);
}

TEST_CASE("history, snapshots and events come from the store") {
    Fixture f;
    auto exec = f.store->add_exec("sbx_1", R"x(["python3","-c","print(1)"])x", 1'700'000'000'500).value();
    REQUIRE(f.store->finish_exec(exec, 0).has_value());
    auto history = body_of(f.call("GET", "/v1/sandboxes/sbx_1/history"))["history"];
    REQUIRE(history.size() == 1);
    CHECK(history[0]["command"] == json::array({"python3", "-c", "print(1)"}));
    CHECK(history[0]["exitCode"] == 0);
    CHECK(history[0]["keyId"] == nullptr);  // the Unix socket
    REQUIRE(f.store->add_snapshot({"ready", "sbx_1", true, "default", 8, 5}).has_value());
    CHECK(body_of(f.call("GET", "/v1/snapshots"))["snapshots"][0]["memory"] == true);
    auto events = body_of(f.call("GET", "/v1/events"))["events"];
    REQUIRE(events.size() == 2);
    CHECK(events[0]["type"] == "created");
    auto after = body_of(f.call("GET", "/v1/events?after=" + std::to_string(events[0]["id"].get<int>())));
    CHECK(after["events"].size() == 1);
    CHECK(f.call("GET", "/v1/events?after=x").status == 400);
    CHECK(f.call("GET", "/v1/events?since=1").status == 400);
}

TEST_CASE("limits report the host and the running count") {
    Fixture f;
    auto limits = body_of(f.call("GET", "/v1/limits"))["limits"];
    CHECK(limits["hostCpus"] == 2);
    CHECK(limits["runningSandboxes"] == 0);  // creating rows count only through a start in flight
    CHECK(limits["maxRunningSandboxes"] == 64);
    CHECK(limits["startsLastMinute"] == 0);
    f.run("sbx_1");
    limits = body_of(f.call("GET", "/v1/limits"))["limits"];
    CHECK(limits["runningSandboxes"] == 1);
    CHECK(limits["memoryInUseMib"] == 1024);
    CHECK(limits["sizes"][3]["cpus"] == 2);
    CHECK(limits["sizes"][3]["memoryMib"] == 4096);
}

TEST_CASE("limit_reached: creates, resumes and forks past --max-running never reach the driver") {
    Fixture f([](api::HostLimits& l) { l.max_sandboxes = 1; });
    f.run("sbx_1");
    f.run("sbx_2");
    f.stop("sbx_2");
    auto create = f.call("POST", "/v1/sandboxes", R"({"memoryMib":512})");
    CHECK(create.status == 429);
    CHECK(body_of(create)["code"] == "limit_reached");
    CHECK(body_of(create)["message"].get<std::string>().find("1 sandbox(es) running") != std::string::npos);
    CHECK(body_of(create)["message"].get<std::string>().find("limit is 1") != std::string::npos);
    CHECK_FALSE(f.driver.last_create);
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_2/resume"))["code"] == "limit_reached");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":1})"))["code"] == "limit_reached");
    CHECK(f.driver.forks == 0);
    // A resume the driver refuses anyway is its invalid_state, not a limit.
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/resume"))["resumeReason"] == "resized");
    // A limit that fits lets them through.
    Fixture roomy([](api::HostLimits& l) { l.max_sandboxes = 2; });
    roomy.run("sbx_1");
    CHECK(roomy.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":1})").status == 201);
    CHECK(body_of(roomy.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":2})"))["code"] ==
          "limit_reached");
}

TEST_CASE("a start in flight holds its slot: a concurrent create is limit_reached") {
    Fixture f([](api::HostLimits& l) { l.max_sandboxes = 1; });
    f.driver.create_ok = true;
    std::promise<void> open;
    f.driver.gate = open.get_future().share();
    auto first = std::async(std::launch::async, [&] { return f.call("POST", "/v1/sandboxes", "{}"); });
    while (!f.driver.entered) {
        std::this_thread::yield();
    }
    auto second = f.call("POST", "/v1/sandboxes", "{}");
    CHECK(second.status == 429);
    CHECK(body_of(second)["code"] == "limit_reached");
    CHECK(body_of(f.call("GET", "/v1/limits"))["limits"]["runningSandboxes"] == 1);
    open.set_value();
    CHECK(first.get().status == 201);
    // The driver's sandbox stays creating here, so the slot is free again.
    CHECK(body_of(f.call("GET", "/v1/limits"))["limits"]["runningSandboxes"] == 0);
}

TEST_CASE("rate_limited past --max-starts-per-minute, with Retry-After; failed starts give theirs back") {
    Fixture f([](api::HostLimits& l) { l.max_starts_per_minute = 2; });
    f.driver.create_ok = true;
    CHECK(f.call("POST", "/v1/sandboxes", "{}").status == 201);
    f.now += 20'000;
    CHECK(f.call("POST", "/v1/sandboxes", "{}").status == 201);
    f.now += 1'000;
    auto limited = f.call("POST", "/v1/sandboxes", "{}");
    CHECK(limited.status == 429);
    CHECK(body_of(limited)["code"] == "rate_limited");
    CHECK(body_of(limited)["retryAfterSeconds"] == 39);
    CHECK(std::find(limited.headers.begin(), limited.headers.end(),
                    std::pair<std::string, std::string>{"Retry-After", "39"}) != limited.headers.end());
    f.run("sbx_1");
    f.stop("sbx_1");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/resume"))["code"] == "rate_limited");
    CHECK(body_of(f.call("GET", "/v1/limits"))["limits"]["startsLastMinute"] == 2);
    f.now += 39'000;  // the first start has left the window
    f.driver.create_ok = false;
    CHECK(body_of(f.call("POST", "/v1/sandboxes", "{}"))["code"] == "capacity_exceeded");  // the driver's
    CHECK(body_of(f.call("GET", "/v1/limits"))["limits"]["startsLastMinute"] == 1);
    CHECK(f.call("POST", "/v1/sandboxes/sbx_1/resume").status == 200);
    CHECK(body_of(f.call("POST", "/v1/sandboxes", "{}"))["code"] == "rate_limited");
}

TEST_CASE("capacity_exceeded when memoryMib would pass --memory-budget-mib") {
    Fixture f([](api::HostLimits& l) { l.memory_budget_mib = 3072; });
    f.run("sbx_1");  // 1024 MiB
    f.run("sbx_2");  // 1024 MiB
    auto full = f.call("POST", "/v1/sandboxes", R"({"memoryMib":1536})");
    CHECK(full.status == 503);
    CHECK(body_of(full)["code"] == "capacity_exceeded");
    CHECK(body_of(full)["message"].get<std::string>().find("2048 MiB of this host's 3072") !=
          std::string::npos);
    CHECK_FALSE(f.driver.last_create);
    // A memory fork needs each child's memory; the parent's is not counted twice.
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":2})"))["code"] ==
          "capacity_exceeded");
    CHECK(f.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":1})").status == 201);
    CHECK(body_of(f.call("GET", "/v1/limits"))["limits"]["memoryBudgetMib"] == 3072);
}

TEST_CASE("Idempotency-Key on forks: the same key and body replays the children, another is a conflict") {
    Fixture f;
    f.run("sbx_1");
    f.run("sbx_2");
    const http::Pairs key = {{"Idempotency-Key", "fork-7"}};
    auto first = f.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":2})", key);
    CHECK(first.status == 201);
    CHECK(body_of(first)["replayed"] == false);
    auto ids = body_of(first)["sandboxes"];
    REQUIRE(ids.size() == 2);
    auto again = f.call("POST", "/v1/sandboxes/sbx_1/fork", R"({ "count" : 2 })", key);
    CHECK(again.status == 200);
    CHECK(body_of(again)["replayed"] == true);
    CHECK(body_of(again)["sandboxes"][0]["id"] == ids[0]["id"]);
    CHECK(body_of(again)["sandboxes"][1]["id"] == ids[1]["id"]);
    CHECK(f.driver.forks == 1);
    auto other_body = f.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":1})", key);
    CHECK(other_body.status == 409);
    CHECK(body_of(other_body)["code"] == "idempotency_conflict");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_2/fork", R"({"count":2})", key))["code"] ==
          "idempotency_conflict");
    CHECK(f.driver.forks == 1);
    // Without a key every fork is new; a replay is no start, so it passes a full rate window.
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/fork", R"({"count":2})"))["replayed"] == false);
    CHECK(f.driver.forks == 2);
}

TEST_CASE("a create replay is answered before admission, even at the limit") {
    Fixture f([](api::HostLimits& l) { l.max_sandboxes = 1; });
    f.driver.create_ok = true;
    const http::Pairs key = {{"Idempotency-Key", "create-9"}};
    auto first = f.call("POST", "/v1/sandboxes", R"({"memoryMib":512})", key);
    REQUIRE(first.status == 201);
    f.run(body_of(first)["sandbox"]["id"].get<std::string>());
    auto again = f.call("POST", "/v1/sandboxes", R"({"memoryMib":512})", key);
    CHECK(again.status == 200);
    CHECK(body_of(again)["replayed"] == true);
    CHECK(body_of(again)["sandbox"]["id"] == body_of(first)["sandbox"]["id"]);
    CHECK(body_of(f.call("POST", "/v1/sandboxes", R"({"memoryMib":768})", key))["code"] ==
          "idempotency_conflict");
    CHECK(body_of(f.call("POST", "/v1/sandboxes", R"({"memoryMib":512})"))["code"] == "limit_reached");
}

TEST_CASE("DELETE /v1/sandboxes by label: labels required, dryRun lists, scoped keys forbidden") {
    Fixture f;
    auto bare = f.call("DELETE", "/v1/sandboxes");
    CHECK(bare.status == 400);
    CHECK(body_of(bare)["code"] == "invalid_argument");
    CHECK(f.call("DELETE", "/v1/sandboxes?labels=owner%3Dalice&dryRun=maybe").status == 400);
    CHECK(f.call("DELETE", "/v1/sandboxes?labels=owner%3Dalice&force=1").status == 400);
    auto dry = body_of(f.call("DELETE", "/v1/sandboxes?labels=owner%3Dalice&dryRun=true"));
    CHECK(dry["ok"] == true);
    CHECK(dry["dryRun"] == true);
    CHECK(dry["deleted"] == json::array({"sbx_1"}));
    CHECK(f.driver.removed.empty());
    auto none = body_of(f.call("DELETE", "/v1/sandboxes?labels=owner%3Dcarol"));
    CHECK(none["deleted"].empty());
    auto done = body_of(f.call("DELETE", "/v1/sandboxes?labels=owner%3Dbob"));
    CHECK(done["dryRun"] == false);
    CHECK(done["deleted"] == json::array({"sbx_2"}));
    CHECK(f.driver.removed == std::vector<std::string>{"sbx_2"});
    auto scoped_key = make_api_key("guest", "sbx_1", 1).value();
    REQUIRE(f.store->add_api_key(scoped_key.record).has_value());
    auto scoped = f.call("DELETE", "/v1/sandboxes?labels=owner%3Dalice", {},
                         {{"Authorization", "Bearer " + scoped_key.secret}}, http::Transport::Tcp);
    CHECK(scoped.status == 403);
    CHECK(body_of(scoped)["code"] == "forbidden");
}

TEST_CASE("named snapshots: made through the driver, listed, read, deleted; a used name 409, unknown 404") {
    Fixture f;
    f.driver.create_ok = true;
    f.run("sbx_1");
    auto made = f.call("POST", "/v1/sandboxes/sbx_1/snapshot", R"({"name":"py-ready"})");
    REQUIRE(made.status == 201);
    const json snap = body_of(made)["snapshot"];
    CHECK(snap["name"] == "py-ready");
    CHECK(snap["from"] == "sbx_1");
    CHECK(snap["image"] == "default");
    CHECK(snap["memory"] == true);
    CHECK(snap["cpus"] == 2);
    CHECK(snap["memoryMib"] == 1024);
    CHECK(snap["diskGib"] == 8);
    CHECK(snap["sizeBytes"] == 4096);
    CHECK(snap["cpuSignature"] == "AuthenticAMD/26/2/1/00ff");
    CHECK(snap["createdAt"].is_string());
    auto again = f.call("POST", "/v1/sandboxes/sbx_1/snapshot", R"({"name":"py-ready"})");
    CHECK(again.status == 409);
    CHECK(body_of(again)["code"] == "already_exists");
    CHECK(f.call("POST", "/v1/sandboxes/sbx_9/snapshot", R"({"name":"other"})").status == 404);
    CHECK(body_of(f.call("GET", "/v1/snapshots"))["snapshots"].size() == 1);
    CHECK(body_of(f.call("GET", "/v1/snapshots/py-ready"))["snapshot"]["name"] == "py-ready");
    CHECK(f.call("GET", "/v1/snapshots/nope").status == 404);
    auto gone = f.call("DELETE", "/v1/snapshots/py-ready");
    CHECK(gone.status == 200);
    CHECK(body_of(gone)["deleted"] == json::array({"py-ready"}));
    CHECK(f.driver.removed_snapshots == std::vector<std::string>{"py-ready"});
    auto unknown = f.call("DELETE", "/v1/snapshots/py-ready");
    CHECK(unknown.status == 404);
    CHECK(body_of(unknown)["code"] == "not_found");
    CHECK(f.driver.removed_snapshots.size() == 1);  // refused before the driver
    CHECK(body_of(f.call("GET", "/v1/snapshots"))["snapshots"].empty());
}

TEST_CASE(
    "a create from a named snapshot takes its machine unless told; cold and why memory was not restored") {
    Fixture f;
    f.driver.create_ok = true;
    REQUIRE(f.store->add_snapshot({"py-ready", "sbx_1", true, "default", 3, 5, 1, 512, 0, "x"}).has_value());
    REQUIRE(f.call("POST", "/v1/sandboxes", R"({"from":"py-ready"})").status == 201);
    CHECK(f.driver.last_create->shape.cpus == 1);
    CHECK(f.driver.last_create->shape.memory_mib == 512);
    CHECK(f.driver.last_create->shape.disk_gib == 3);
    CHECK_FALSE(f.driver.last_create->request.cold);
    f.driver.memory_restored = false;
    f.driver.start_reason = "cpu_mismatch";
    auto sized = f.call("POST", "/v1/sandboxes", R"({"from":"py-ready","size":"small","cold":true})");
    REQUIRE(sized.status == 201);
    CHECK(f.driver.last_create->shape.size == "small");
    CHECK(f.driver.last_create->request.cold);
    CHECK(body_of(sized)["memoryRestored"] == false);
    CHECK(body_of(sized)["startReason"] == "cpu_mismatch");
    f.driver.memory_restored = true;
    auto restored = body_of(f.call("POST", "/v1/sandboxes", R"({"from":"py-ready"})"));
    CHECK(restored["memoryRestored"] == true);
    CHECK_FALSE(restored.contains("startReason"));
    f.driver.memory_restored.reset();
    CHECK_FALSE(body_of(f.call("POST", "/v1/sandboxes", "{}")).contains("memoryRestored"));
    CHECK(f.call("POST", "/v1/sandboxes", R"({"cold":1})").status == 400);
}

TEST_CASE("files of a stopped sandbox come from its disk; changes are invalid_state") {
    if (std::system("PATH=$PATH:/sbin:/usr/sbin command -v mkfs.ext4 >/dev/null 2>&1") != 0) {
        MESSAGE("skipped: mkfs.ext4 (e2fsprogs) is not installed");
        return;
    }
    Fixture f;
    const std::string tree = f.dir + "/tree";
    std::filesystem::create_directories(tree + "/root/d");
    std::ofstream(tree + "/root/x") << "hi from the disk\n";
    ::chmod((tree + "/root/x").c_str(), 0600);
    std::filesystem::create_symlink("/root/x", tree + "/root/link");
    const std::string image = f.dir + "/disk.ext4";
    REQUIRE(std::system(("PATH=$PATH:/sbin:/usr/sbin mkfs.ext4 -q -F -d " + tree + " " + image +
                         " 8M >/dev/null 2>&1")
                            .c_str()) == 0);
    f.driver.disk_path = image;
    f.run("sbx_1");
    f.stop("sbx_1");
    const std::string base = "/v1/sandboxes/sbx_1/files";

    auto stat = f.call("GET", base + "/stat?path=/root/x");
    REQUIRE(stat.status == 200);
    auto st = body_of(stat)["stat"];
    CHECK(st["path"] == "/root/x");
    CHECK(st["type"] == "file");
    CHECK(st["size"] == 17);
    CHECK(st["mode"] == 0600);
    CHECK(st.contains("mtime"));
    CHECK(st["uid"] == ::getuid());
    CHECK(st["gid"] == ::getgid());
    auto link = body_of(f.call("GET", base + "/stat?path=/root/link"))["stat"];
    CHECK(link["type"] == "symlink");
    CHECK(link["target"] == "/root/x");

    auto list = f.call("GET", base + "/list?path=/root");
    REQUIRE(list.status == 200);
    auto entries = body_of(list)["entries"];
    REQUIRE(entries.size() == 3);
    CHECK(entries[0]["name"] == "d");
    CHECK(entries[0]["type"] == "dir");
    CHECK(entries[1]["name"] == "link");
    CHECK(entries[2] ==
          json{{"name", "x"}, {"type", "file"}, {"size", 17}, {"mode", 0600}, {"mtime", st["mtime"]}});

    auto download = f.call("GET", base + "?path=/root/link");
    REQUIRE(download.status == 200);
    REQUIRE(download.stream);
    http::BodyWriter writer(1 << 20, [] {});
    download.stream(writer);
    CHECK_FALSE(writer.cancelled());
    std::string got;
    while (auto chunk = writer.take()) {
        got += *chunk;
    }
    CHECK(got == "hi from the disk\n");
    CHECK(f.call("GET", base + "?path=/root/d").status == 400);
    CHECK(body_of(f.call("GET", base + "?path=/root/none"))["code"] == "not_found");
    CHECK(body_of(f.call("GET", base + "/list?path=/root/x"))["code"] == "invalid_argument");

    for (const auto& [method, target, body] :
         {std::tuple{"PUT", base + "?path=/root/y", std::string()},
          {"POST", base + "/mkdir", std::string(R"({"path":"/root/e"})")},
          {"DELETE", base + "?path=/root/x", std::string()}}) {
        auto refused = f.call(method, target, body);
        CHECK(refused.status == 409);
        CHECK(body_of(refused)["code"] == "invalid_state");
        CHECK(body_of(refused)["message"].get<std::string>().find("resume") != std::string::npos);
    }

    // A disk that is not ext4 is refused with a coded error, not read.
    std::ofstream(image, std::ios::trunc) << std::string(4096, 'z');
    CHECK(body_of(f.call("GET", base + "/stat?path=/"))["code"] == "invalid_state");
    // A running sandbox is still its agent's.
    f.run("sbx_2");
    CHECK(body_of(f.call("GET", "/v1/sandboxes/sbx_2/files/stat?path=/"))["message"] == "not running");
}

TEST_CASE("hosted ports: off without a proxy; private ports carry their token; unhost; scoped keys") {
    Fixture off;
    CHECK(body_of(off.call("POST", "/v1/sandboxes/sbx_1/ports", R"({"port":8080,"localhost":true})"))["code"] ==
          "invalid_state");

    Fixture f;
    DaemonInfo info{"host-a", "test", "/images", api::HostLimits{}};
    info.proxy = ProxyInfo{"sbx.localhost", 8443};
    info.ca_pem = "-----BEGIN CERTIFICATE-----\n";
    f.service = std::make_unique<ApiService>(*f.store, f.driver, info, [&f] { return f.now; });
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/ports", R"({"port":0})"))["code"] == "invalid_argument");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/ports", R"({"port":8080,"x":1})"))["code"] ==
          "invalid_argument");
    // No network: only the agent's way in.
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_1/ports", R"({"port":8080})"))["code"] == "invalid_argument");
    CHECK(body_of(f.call("POST", "/v1/sandboxes/sbx_9/ports", R"({"port":8080,"localhost":true})"))["code"] ==
          "not_found");

    auto hosted = body_of(f.call("POST", "/v1/sandboxes/sbx_1/ports", R"({"port":8080,"localhost":true})"));
    const auto& port = hosted["hostedPort"];
    const std::string url = port["url"];
    CHECK(url.starts_with("https://"));
    CHECK(url.ends_with("-8080.sbx.localhost:8443/"));
    CHECK(port["tokenUrl"] == url + "?_token=" + port["token"].get<std::string>());
    auto made_public =
        body_of(f.call("POST", "/v1/sandboxes/sbx_1/ports", R"({"port":8080,"localhost":true,"public":true})"));
    CHECK(made_public["hostedPort"]["url"] == url);
    CHECK_FALSE(made_public["hostedPort"].contains("token"));
    CHECK(body_of(f.call("GET", "/v1/sandboxes/sbx_1/ports"))["hostedPorts"].size() == 1);
    CHECK(body_of(f.call("GET", "/v1/ports"))["hostedPorts"].size() == 1);
    CHECK(body_of(f.call("GET", "/v1/ca"))["certificate"] == "-----BEGIN CERTIFICATE-----\n");

    CHECK(body_of(f.call("DELETE", "/v1/sandboxes/sbx_1/ports/80"))["code"] == "not_found");
    CHECK(body_of(f.call("DELETE", "/v1/sandboxes/sbx_1/ports/x"))["code"] == "invalid_argument");
    CHECK(body_of(f.call("DELETE", "/v1/sandboxes/sbx_1/ports/8080"))["unhosted"] == 8080);
    CHECK(body_of(f.call("GET", "/v1/ports"))["hostedPorts"].empty());
}

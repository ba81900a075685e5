// The API service over a real store and a recording driver, without
// sockets: routing, scopes, selectors and what reaches the driver.
#include "host-tools/sbxd/daemon/api_service.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>

#include "host-tools/sbxd/auth/api_keys.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using nlohmann::json;

namespace {

struct RecordingDriver final : SandboxDriver {
    std::optional<CreateSpec> last_create;
    std::optional<api::ForkRequest> last_fork;
    Result<CreateOutcome> create(const CreateSpec& spec) override {
        last_create = spec;
        return make_coded_error("capacity_exceeded", "no room");
    }
    Result<SandboxRecord> stop(const std::string&, const api::StopRequest&) override {
        return make_coded_error("invalid_state", "not running");
    }
    Result<ResumeOutcome> resume(const std::string& id, const api::ResumeRequest&) override {
        SandboxRecord sandbox;
        sandbox.id = id;
        return ResumeOutcome{sandbox, false, "resized"};
    }
    Result<std::vector<SandboxRecord>> fork(const std::string&, const api::ForkRequest& request,
                                            const std::optional<IdempotencyClaim>&) override {
        last_fork = request;
        return std::vector<SandboxRecord>{};
    }
    Result<void> remove(const std::string&) override { return ok(); }
    Result<SnapshotRecord> snapshot(const std::string&, const api::SnapshotRequest&) override {
        return make_coded_error("not_implemented", "later");
    }
    Result<AgentAddress> agent(const std::string&) override {
        return make_coded_error("invalid_state", "not running");
    }
};

struct Fixture {
    std::string dir;
    std::unique_ptr<Store> store;
    RecordingDriver driver;
    std::unique_ptr<ApiService> service;

    Fixture() {
        std::string templ = (std::filesystem::temp_directory_path() / "sbxd-api-XXXXXX").string();
        REQUIRE(::mkdtemp(templ.data()) != nullptr);
        dir = templ;
        store = std::move(Store::open(dir + "/sbxd.db").value());
        api::HostLimits limits;
        limits.host_cpus = 2;
        limits.max_memory_mib = 4096;
        service =
            std::make_unique<ApiService>(*store, driver, DaemonInfo{"host-a", "test", "/images", limits},
                                         [] { return UnixMillis{1'700'000'000'000}; });
        for (const auto& [id, owner] : {std::pair{"sbx_1", "alice"}, {"sbx_2", "bob"}}) {
            SandboxRecord s;
            s.id = id;
            s.name = id;
            s.from = "default";
            s.size = "small";
            s.labels = {{"owner", owner}};
            s.env = {{"SECRET", "hunter2"}};
            s.created_at = 1'700'000'000'000;
            s.last_activity_at = s.created_at;
            REQUIRE(store->create_sandbox(s, std::nullopt).has_value());
        }
    }
    ~Fixture() { std::filesystem::remove_all(dir); }

    http::Response call(std::string method, std::string target, std::string body = {},
                        http::Pairs headers = {}, http::Transport transport = http::Transport::Unix) const {
        http::Request request;
        request.method = std::move(method);
        auto split = http::split_target(target).value();
        request.path = split.first;
        request.query = split.second;
        request.body = std::move(body);
        request.headers = std::move(headers);
        request.request_id = "req_test";
        request.transport = transport;
        return service->handle(std::move(request));
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

TEST_CASE("history, snapshots and events come from the store") {
    Fixture f;
    auto exec = f.store->add_exec("sbx_1", R"x(["python3","-c","print(1)"])x", 1'700'000'000'500).value();
    REQUIRE(f.store->finish_exec(exec, 0).has_value());
    auto history = body_of(f.call("GET", "/v1/sandboxes/sbx_1/history"))["history"];
    REQUIRE(history.size() == 1);
    CHECK(history[0]["command"] == json::array({"python3", "-c", "print(1)"}));
    CHECK(history[0]["exitCode"] == 0);
    REQUIRE(f.store->add_snapshot({"ready", "sbx_1", true, "default", 8, 5}).has_value());
    CHECK(body_of(f.call("GET", "/v1/snapshots"))["snapshots"][0]["hasMemory"] == true);
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
    CHECK(limits["runningSandboxes"] == 2);  // two creating
    CHECK(limits["sizes"][3]["cpus"] == 2);
    CHECK(limits["sizes"][3]["memoryMib"] == 4096);
}

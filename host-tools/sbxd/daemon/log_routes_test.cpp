// GET /v1/sandboxes/{id}/logs over a real store and a driver whose console
// logs are files in a temporary folder: ranges, the size headers, the
// query's rules, a streamed large log, scopes, states.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/testing/api_fixture.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using nlohmann::json;

using testing::code_of;
using testing::header;

namespace {

struct LogDriver final : testing::UnusedDriver {
    std::string dir;
    Result<std::string> console_log(const std::string& id) override { return dir + "/" + id + ".log"; }
};

struct Fixture {
    testing::TempDir tmp{"sbxd-logs"};
    std::string dir = tmp.path();
    std::unique_ptr<Store> store = testing::open_store(tmp.db());
    LogDriver driver;
    std::unique_ptr<ApiService> service;

    Fixture() {
        driver.dir = dir;
        service = std::make_unique<ApiService>(*store, driver, DaemonInfo{"host-a", "test", "/images", {}},
                                               [] { return UnixMillis{1'700'000'000'000}; });
        for (const char* id : {"sbx_1", "sbx_2"}) {
            testing::add_sandbox(*store, id);
        }
    }

    void write_log(const std::string& id, const std::string& text) const {
        std::ofstream(dir + "/" + id + ".log", std::ios::binary | std::ios::trunc) << text;
    }

    http::Response get(const std::string& target, http::Transport transport = http::Transport::Unix,
                       http::Pairs headers = {}) const {
        return service->handle(testing::api_request("GET", target, {}, std::move(headers), transport));
    }
};

// The whole body, streamed or not.
std::string body_of(const http::Response& response) {
    if (!response.stream) {
        return response.body;
    }
    http::BodyWriter writer(std::size_t{64} << 20, [] {});
    response.stream(writer);
    CHECK_FALSE(writer.cancelled());
    std::string all;
    while (auto chunk = writer.take()) {
        all += *chunk;
    }
    return all;
}

}  // namespace

TEST_CASE("the whole log, a range from an offset, the last bytes; the size in a header") {
    Fixture f;
    f.write_log("sbx_1", "Linux version 6.12\nhello\n");
    auto all = f.get("/v1/sandboxes/sbx_1/logs");
    REQUIRE(all.status == 200);
    CHECK(all.body == "Linux version 6.12\nhello\n");
    CHECK(header(all, "Content-Type") == "text/plain");
    CHECK(header(all, "Sandbox-Log-Size") == "25");
    CHECK(header(all, "Sandbox-Log-Offset") == "0");

    auto from = f.get("/v1/sandboxes/sbx_1/logs?offset=19");
    CHECK(from.body == "hello\n");
    CHECK(header(from, "Sandbox-Log-Offset") == "19");
    auto at_end = f.get("/v1/sandboxes/sbx_1/logs?offset=25");
    CHECK(at_end.status == 200);
    CHECK(at_end.body.empty());
    // Past the end (the log of an earlier VMM): empty, and the size tells.
    auto past = f.get("/v1/sandboxes/sbx_1/logs?offset=1000");
    CHECK(past.status == 200);
    CHECK(past.body.empty());
    CHECK(header(past, "Sandbox-Log-Size") == "25");
    CHECK(header(past, "Sandbox-Log-Offset") == "25");

    auto tail = f.get("/v1/sandboxes/sbx_1/logs?tail=6");
    CHECK(tail.body == "hello\n");
    CHECK(header(tail, "Sandbox-Log-Offset") == "19");
    CHECK(f.get("/v1/sandboxes/sbx_1/logs?tail=1000").body.size() == 25);
    CHECK(f.get("/v1/sandboxes/sbx_1/logs?tail=0").body.empty());
}

TEST_CASE("no console file yet is an empty log; an unknown sandbox is not_found") {
    Fixture f;
    auto empty = f.get("/v1/sandboxes/sbx_2/logs");
    CHECK(empty.status == 200);
    CHECK(empty.body.empty());
    CHECK(header(empty, "Sandbox-Log-Size") == "0");
    auto missing = f.get("/v1/sandboxes/sbx_9/logs");
    CHECK(missing.status == 404);
    CHECK(code_of(missing) == "not_found");
}

TEST_CASE("bad query values are invalid_argument") {
    Fixture f;
    f.write_log("sbx_1", "x");
    for (const char* query :
         {"offset=-1", "offset=abc", "offset=", "offset=+3", "offset=1x", "tail=1.5",
          "offset=99999999999999999999999", "offset=1&tail=1", "offset=1&offset=2", "lines=3"}) {
        auto r = f.get(std::string("/v1/sandboxes/sbx_1/logs?") + query);
        CHECK_MESSAGE(r.status == 400, query);
        CHECK_MESSAGE(code_of(r) == "invalid_argument", query);
    }
}

TEST_CASE("a log over 1 MiB is streamed, byte for byte") {
    Fixture f;
    std::string big;
    for (int i = 0; big.size() < (std::size_t{3} << 20); ++i) {
        big += "line " + std::to_string(i) + " of the console\n";
    }
    f.write_log("sbx_1", big);
    auto all = f.get("/v1/sandboxes/sbx_1/logs");
    REQUIRE(all.status == 200);
    CHECK(static_cast<bool>(all.stream));
    CHECK(header(all, "Sandbox-Log-Size") == std::to_string(big.size()));
    CHECK(body_of(all) == big);
    auto tail = f.get("/v1/sandboxes/sbx_1/logs?tail=2000000");
    CHECK(body_of(tail) == big.substr(big.size() - 2000000));
    auto small = f.get("/v1/sandboxes/sbx_1/logs?tail=100");
    CHECK_FALSE(static_cast<bool>(small.stream));
    CHECK(small.body == big.substr(big.size() - 100));
}

TEST_CASE("a key scoped to a sandbox reads its own log only") {
    Fixture f;
    f.write_log("sbx_1", "one\n");
    auto key = make_api_key("guest", std::string("sbx_1"), 1).value();
    REQUIRE(f.store->add_api_key(key.record).has_value());
    http::Pairs auth{{"Authorization", "Bearer " + key.secret}};
    CHECK(f.get("/v1/sandboxes/sbx_1/logs", http::Transport::Tcp, auth).body == "one\n");
    auto other = f.get("/v1/sandboxes/sbx_2/logs", http::Transport::Tcp, auth);
    CHECK(other.status == 403);
    CHECK(code_of(other) == "forbidden");
}

TEST_CASE("every state has its log, a stopped or crashed one too") {
    Fixture f;
    f.write_log("sbx_1", "boot\n");
    for (auto state : {SandboxState::Running, SandboxState::Stopping, SandboxState::Stopped}) {
        REQUIRE(f.store->change_state("sbx_1", {state, 1'700'000'000'000, std::nullopt}).has_value());
        CHECK(f.get("/v1/sandboxes/sbx_1/logs").body == "boot\n");
    }
}

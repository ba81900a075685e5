// POST, GET /v1/keys and DELETE /v1/keys/{id} over a real store: a key
// made through the API works on TCP with its scope, read-only flag and
// expiry; the list never shows a secret; a revoked key is 401; only
// host-wide callers manage keys, and a read-only one only lists them.
#include <doctest/doctest.h>

#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/testing/api_fixture.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using nlohmann::json;

namespace {

struct Fixture {
    testing::TempDir tmp{"sbxd-keys"};
    std::unique_ptr<Store> store = testing::open_store(tmp.db());
    testing::UnusedDriver driver;
    UnixMillis now = 1'700'000'000'000;
    std::unique_ptr<ApiService> service;

    Fixture() {
        service = std::make_unique<ApiService>(*store, driver, DaemonInfo{"host-a", "test", "/images", {}},
                                               [this] { return now; });
        for (const char* id : {"sbx_1", "sbx_2"}) {
            testing::add_sandbox(*store, id);
        }
    }

    // On the Unix socket (the host's owner), or on TCP with SECRET.
    http::Response call(std::string method, const std::string& target, std::string body = {},
                        const std::string& secret = {}) const {
        if (secret.empty()) {
            return service->handle(testing::api_request(std::move(method), target, std::move(body)));
        }
        return service->handle(testing::api_request(std::move(method), target, std::move(body),
                                                    {{"Authorization", "Bearer " + secret}}, http::Transport::Tcp));
    }
};

json body_of(const http::Response& response) {
    return json::parse(response.body);
}

}  // namespace

TEST_CASE("a key made through the API works with its scope; listed without its secret; revoked is 401") {
    Fixture f;
    auto made = f.call("POST", "/v1/keys", R"({"name":"agent for sbx_1","sandboxId":"sbx_1"})");
    REQUIRE(made.status == 201);
    json reply = body_of(made);
    const std::string secret = reply["secret"];
    const std::string id = reply["key"]["id"];
    CHECK(secret.rfind("sbxk_", 0) == 0);
    CHECK(reply["key"]["name"] == "agent for sbx_1");
    CHECK(reply["key"]["sandboxId"] == "sbx_1");
    CHECK(reply["key"]["readOnly"] == false);
    CHECK(reply["key"]["expiresAt"].is_null());

    CHECK(f.call("GET", "/v1/sandboxes/sbx_1", {}, secret).status == 200);
    CHECK(f.call("GET", "/v1/sandboxes/sbx_2", {}, secret).status == 403);
    CHECK(f.call("GET", "/v1/sandboxes", {}, secret).status == 403);

    auto listed = f.call("GET", "/v1/keys");
    REQUIRE(listed.status == 200);
    REQUIRE(body_of(listed)["keys"].size() == 1);
    CHECK(body_of(listed)["keys"][0]["id"] == id);
    CHECK(listed.body.find(secret.substr(5)) == std::string::npos);

    auto gone = f.call("DELETE", "/v1/keys/" + id);
    CHECK(gone.status == 200);
    CHECK(body_of(gone)["deleted"] == id);
    CHECK(f.call("GET", "/v1/sandboxes/sbx_1", {}, secret).status == 401);
    auto again = f.call("DELETE", "/v1/keys/" + id);
    CHECK(again.status == 404);
    CHECK(body_of(again)["code"] == "not_found");
}

TEST_CASE("read-only and expiring keys made through the API keep those limits") {
    Fixture f;
    auto viewer = body_of(f.call("POST", "/v1/keys", R"({"readOnly":true})"));
    auto brief = body_of(f.call("POST", "/v1/keys", R"({"expiresInSeconds":60})"));
    CHECK(viewer["key"]["readOnly"] == true);
    CHECK(brief["key"]["expiresAt"] == "2023-11-14T22:14:20.000Z");
    CHECK(f.call("GET", "/v1/sandboxes", {}, viewer["secret"]).status == 200);
    CHECK(f.call("DELETE", "/v1/sandboxes/sbx_1", {}, viewer["secret"]).status == 403);
    CHECK(f.call("GET", "/v1/sandboxes", {}, brief["secret"]).status == 200);
    f.now += 60'000;
    CHECK(f.call("GET", "/v1/sandboxes", {}, brief["secret"]).status == 401);
}

TEST_CASE("only host-wide keys manage keys; a read-only one may list") {
    Fixture f;
    auto host = body_of(f.call("POST", "/v1/keys", R"({"name":"admin"})"));
    auto viewer = body_of(f.call("POST", "/v1/keys", R"({"readOnly":true})"));
    auto scoped = body_of(f.call("POST", "/v1/keys", R"({"sandboxId":"sbx_1"})"));
    const std::string scoped_id = scoped["key"]["id"];

    // A sandbox's key (SANDBOXER_TOKEN is one) makes, sees and revokes none.
    for (auto [method, target, body] : {std::tuple{"POST", "/v1/keys", "{}"}, std::tuple{"GET", "/v1/keys", ""},
                                        std::tuple{"DELETE", "/v1/keys/x", ""}}) {
        auto refused = f.call(method, target, body, scoped["secret"]);
        CHECK_MESSAGE(refused.status == 403, method << " " << target);
        CHECK(body_of(refused)["code"] == "forbidden");
    }
    CHECK(f.call("POST", "/v1/keys", "{}", viewer["secret"]).status == 403);
    CHECK(f.call("DELETE", "/v1/keys/" + scoped_id, {}, viewer["secret"]).status == 403);
    CHECK(f.call("GET", "/v1/keys", {}, viewer["secret"]).status == 200);

    auto made = f.call("POST", "/v1/keys", R"({"name":"ci"})", host["secret"]);
    REQUIRE(made.status == 201);
    CHECK(f.call("GET", "/v1/sandboxes", {}, body_of(made)["secret"]).status == 200);
    CHECK(f.call("DELETE", "/v1/keys/" + scoped_id, {}, host["secret"]).status == 200);
    CHECK(f.call("GET", "/v1/sandboxes/sbx_1", {}, scoped["secret"]).status == 401);
}

TEST_CASE("a bad key request is a JSON error with its code") {
    Fixture f;
    auto code = [&](const std::string& body) { return body_of(f.call("POST", "/v1/keys", body))["code"]; };
    CHECK(code(R"({"sandboxId":"sbx_none"})") == "not_found");
    CHECK(code(R"({"sandboxId":""})") == "invalid_argument");
    CHECK(code(R"({"expiresInSeconds":0})") == "invalid_argument");
    CHECK(code(R"({"expiresInSeconds":"1d"})") == "invalid_argument");
    CHECK(code(R"({"name":"a\nb"})") == "invalid_argument");
    CHECK(code(R"({"name":")" + std::string(129, 'x') + "\"}") == "invalid_argument");
    CHECK(code(R"({"scope":"all"})") == "invalid_argument");
    CHECK(code("not json") == "bad_request");
    CHECK(body_of(f.call("GET", "/v1/keys"))["keys"].empty());
}

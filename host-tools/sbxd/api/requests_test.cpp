#include "host-tools/sbxd/api/requests.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "host-tools/sbxd/api/api_error.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using namespace sbx::sbxd::api;

namespace {

template <typename T>
std::string code_of(const Result<T>& r) {
    REQUIRE_FALSE(r.has_value());
    return r.error().code;
}

template <typename T>
std::string message_of(const Result<T>& r) {
    REQUIRE_FALSE(r.has_value());
    return r.error().message;
}

HostLimits two_cpu_host() {
    HostLimits h;
    h.host_cpus = 2;
    h.host_memory_mib = 7680;
    h.max_memory_mib = 7168;
    return h;
}

}  // namespace

TEST_CASE("an empty create body takes every default") {
    for (std::string_view body : {"", "  \n", "{}"}) {
        auto r = parse_create(body);
        REQUIRE(r.has_value());
        CHECK_FALSE(r->size);
        CHECK_FALSE(r->from);
        CHECK(r->labels.empty());
        CHECK_FALSE(r->no_env);
        CHECK_FALSE(r->idle_minutes);
        CHECK_FALSE(r->ttl_seconds);
        CHECK_FALSE(r->no_auto_stop);
    }
}

TEST_CASE("a full create body parses into its fields") {
    auto r = parse_create(R"({"size":"large","cpus":2,"memoryMib":2048,"diskGib":20,"from":"py-ready",
        "labels":{"owner":"alice","run":"42"},"env":{"FOO":"bar","_X1":""},"noEnv":true,
        "idleMinutes":15,"ttl":"2h30m"})");
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
    CHECK(r->size == "large");
    CHECK(r->cpus == 2);
    CHECK(r->memory_mib == 2048);
    CHECK(r->disk_gib == 20);
    CHECK(r->from == "py-ready");
    CHECK(r->labels == StringMap{{"owner", "alice"}, {"run", "42"}});
    CHECK(r->env == StringMap{{"FOO", "bar"}, {"_X1", ""}});
    CHECK(r->no_env);
    CHECK(r->idle_minutes == 15);
    CHECK(r->ttl_seconds == 9000);
}

TEST_CASE("bodies that are not a JSON object are bad_request") {
    CHECK(code_of(parse_create("{")) == "bad_request");
    CHECK(code_of(parse_create("[1,2]")) == "bad_request");
    CHECK(code_of(parse_create("\"small\"")) == "bad_request");
    CHECK(code_of(parse_create("null")) == "bad_request");
    CHECK(code_of(parse_stop("{\"memory\":true} trailing")) == "bad_request");
}

TEST_CASE("unknown fields are refused by name") {
    auto r = parse_create(R"({"size":"small","memoryMB":4096})");
    CHECK(code_of(r) == "invalid_argument");
    CHECK(message_of(r).find("memoryMB") != std::string::npos);
    CHECK(code_of(parse_stop(R"({"memory":false,"force":true})")) == "invalid_argument");
    CHECK(code_of(parse_fork(R"({"n":2})")) == "invalid_argument");
}

TEST_CASE("null fields count as absent") {
    auto r = parse_create(R"({"size":null,"ttl":null,"labels":null})");
    REQUIRE(r.has_value());
    CHECK_FALSE(r->size);
}

TEST_CASE("wrong types and values out of range are invalid_argument naming the field") {
    const char* bad[][2] = {
        {R"({"size":"huge"})", "size"},
        {R"({"size":4})", "size"},
        {R"({"cpus":0})", "cpus"},
        {R"({"cpus":1.5})", "cpus"},
        {R"({"cpus":"2"})", "cpus"},
        {R"({"cpus":18446744073709551615})", "cpus"},
        {R"({"memoryMib":-1})", "memoryMib"},
        {R"({"diskGib":0})", "diskGib"},
        {R"({"from":"Has Spaces"})", "from"},
        {R"({"from":""})", "from"},
        {R"({"labels":["a"]})", "labels"},
        {R"({"labels":{"owner":1}})", "labels.owner"},
        {R"({"labels":{"Owner":"x"}})", "Owner"},
        {R"({"labels":{"owner":"a,b"}})", "owner"},
        {R"({"env":{"1X":"y"}})", "1X"},
        {R"({"env":{"A-B":"y"}})", "A-B"},
        {R"({"env":{"SANDBOXER_TOKEN":"x"}})", "SANDBOXER_TOKEN"},
        {R"({"env":{"X":"a\nB=c"}})", "line break"},
        {R"({"env":{"X":"a "}})", "blank"},
        {R"({"noEnv":"yes"})", "noEnv"},
        {R"({"idleMinutes":-5})", "idleMinutes"},
        {R"({"idleMinutes":43201})", "idleMinutes"},
        {R"({"ttl":"1 hour"})", "ttl"},
        {R"({"ttl":"31d"})", "ttl"},
        {R"({"ttl":"30s"})", "ttl"},
        {R"({"ttl":3600})", "ttl"},
        {R"({"ttl":"1h","noAutoStop":true})", "noAutoStop"},
        {R"({"egress":"none"})", "egress"},
        {R"({"egress":true})", "egress"},
        {R"({"egress":"allow-list"})", "egressAllow"},
        {R"({"egress":"deny-all","egressAllow":["203.0.113.0/24"]})", "egressAllow"},
        {R"({"egressAllow":"203.0.113.0/24"})", "egressAllow"},
        {R"({"egressAllow":[7]})", "egressAllow[0]"},
        {R"({"egressAllow":[]})", "egressAllow"},
        {R"({"egressAllow":["10.0.0.0/8"]})", "10.0.0.0/8"},
        {R"({"egressAllow":["203.0.113.9/24"]})", "203.0.113.0/24"},
    };
    for (const auto& [body, field] : bad) {
        CAPTURE(body);
        auto r = parse_create(body);
        CHECK(code_of(r) == "invalid_argument");
        CHECK(message_of(r).find(field) != std::string::npos);
    }
}

TEST_CASE("limits on labels and env sizes") {
    nlohmann::json labels = nlohmann::json::object();
    for (int i = 0; i < 33; ++i) {
        labels["k" + std::to_string(i)] = "v";
    }
    CHECK(code_of(parse_create(nlohmann::json{{"labels", labels}}.dump())) == "invalid_argument");
    labels.erase("k0");
    CHECK(parse_create(nlohmann::json{{"labels", labels}}.dump()).has_value());
    CHECK(code_of(parse_create(nlohmann::json{{"labels", {{std::string(64, 'a'), "v"}}}}.dump())) ==
          "invalid_argument");
    CHECK(parse_create(nlohmann::json{{"labels", {{std::string(63, 'a'), std::string(255, 'v')}}}}.dump())
              .has_value());
    CHECK(code_of(parse_create(nlohmann::json{{"env", {{"BIG", std::string(70000, 'x')}}}}.dump())) ==
          "invalid_argument");
    CHECK(code_of(parse_create(nlohmann::json{{"env", {{"NUL", std::string("a\0b", 3)}}}}.dump())) ==
          "invalid_argument");
}

TEST_CASE("durations") {
    CHECK(parse_duration("90s").value() == 90);
    CHECK(parse_duration("30m").value() == 1800);
    CHECK(parse_duration("1h30m10s").value() == 5410);
    CHECK(parse_duration("30d").value() == 30 * 86400);
    CHECK_FALSE(parse_duration("30d1s").has_value());
    CHECK_FALSE(parse_duration("").has_value());
    CHECK_FALSE(parse_duration("10").has_value());
    CHECK_FALSE(parse_duration("h").has_value());
    CHECK_FALSE(parse_duration("5w").has_value());
    CHECK_FALSE(parse_duration("-5m").has_value());
    CHECK_FALSE(parse_duration("99999999999999999999d").has_value());
}

TEST_CASE("idleMinutes 0 is off and noAutoStop alone is fine") {
    auto r = parse_create(R"({"idleMinutes":0,"noAutoStop":true})");
    REQUIRE(r.has_value());
    CHECK_FALSE(r->idle_minutes);
    CHECK(r->no_auto_stop);
}

TEST_CASE("egress: internet unless given; deny-all; an allow list, with or without its mode") {
    CHECK(parse_create("{}")->egress == sbx::sbxd::net::Egress{});
    CHECK(parse_create(R"({"egress":"internet"})")->egress == sbx::sbxd::net::Egress{});
    CHECK(parse_create(R"({"egress":"deny-all"})")->egress == sbx::sbxd::net::Egress::deny_all());
    auto listed = parse_create(R"({"egress":"allow-list","egressAllow":["203.0.113.0/24","198.51.100.7/32"]})");
    REQUIRE(listed);
    CHECK(sbx::sbxd::net::format_egress(listed->egress) == "allow:198.51.100.7/32,203.0.113.0/24");
    auto implied = parse_create(R"({"egressAllow":["203.0.113.0/24"]})");
    REQUIRE(implied);
    CHECK(implied->egress.mode == sbx::sbxd::net::EgressMode::allow_list);

    CHECK(parse_egress_request(R"({"egress":"deny-all"})")->egress == sbx::sbxd::net::Egress::deny_all());
    CHECK(parse_egress_request(R"({"egressAllow":["192.0.2.0/24"]})")->egress.allow.size() == 1);
    CHECK(code_of(parse_egress_request("{}")) == "invalid_argument");  // required
    CHECK(code_of(parse_egress_request(R"({"egress":"internet","idleMinutes":3})")) == "invalid_argument");
    CHECK(code_of(parse_egress_request(R"({"egress":"allow-list","egressAllow":["127.0.0.0/8"]})")) == "invalid_argument");
}

TEST_CASE("cold is a boolean, off unless given") {
    CHECK_FALSE(parse_create("{}").value().cold);
    CHECK(parse_create(R"({"cold":true,"from":"py-ready"})").value().cold);
    CHECK(code_of(parse_create(R"({"cold":"yes"})")) == "invalid_argument");
}

TEST_CASE("stop, resume, fork and snapshot bodies") {
    CHECK(parse_stop("").value().memory);
    CHECK_FALSE(parse_stop(R"({"memory":false})").value().memory);
    CHECK(code_of(parse_stop(R"({"memory":0})")) == "invalid_argument");

    CHECK_FALSE(parse_resume("{}").value().size);
    CHECK(parse_resume(R"({"size":"xlarge"})").value().size == "xlarge");
    CHECK(code_of(parse_resume(R"({"size":"tiny"})")) == "invalid_argument");
    CHECK_FALSE(parse_resume("{}").value().disk_gib);
    CHECK(parse_resume(R"({"diskGib":16})").value().disk_gib == 16);
    CHECK(code_of(parse_resume(R"({"diskGib":0})")) == "invalid_argument");
    CHECK(code_of(parse_resume(R"({"diskGib":"16"})")) == "invalid_argument");

    auto fork = parse_fork("");
    REQUIRE(fork.has_value());
    CHECK(fork->count == 1);
    CHECK(fork->memory);
    fork = parse_fork(R"({"count":16,"memory":false})");
    CHECK(fork->count == 16);
    CHECK_FALSE(fork->memory);
    CHECK(code_of(parse_fork(R"({"count":17})")) == "invalid_argument");
    CHECK(code_of(parse_fork(R"({"count":0})")) == "invalid_argument");

    CHECK(parse_snapshot(R"({"name":"py-3.12_ready"})").value().name == "py-3.12_ready");
    CHECK(code_of(parse_snapshot("{}")) == "invalid_argument");
    CHECK(code_of(parse_snapshot(R"({"name":"-lead"})")) == "invalid_argument");
    CHECK(code_of(parse_snapshot(R"({"name":"a/b"})")) == "invalid_argument");
    CHECK(code_of(parse_snapshot(nlohmann::json{{"name", std::string(64, 'a')}}.dump())) ==
          "invalid_argument");
}

TEST_CASE("list selectors") {
    auto q =
        parse_list_query({{"labels", "owner=alice,run=42"}, {"state", "running,paused"}, {"labels", "x=y"}});
    REQUIRE(q.has_value());
    CHECK(q->labels == StringMap{{"owner", "alice"}, {"run", "42"}, {"x", "y"}});
    CHECK(q->states == std::vector<SandboxState>{SandboxState::Running, SandboxState::Paused});
    CHECK(parse_list_query({}).value().labels.empty());
    CHECK(parse_list_query({{"labels", "owner="}}).value().labels.at("owner").empty());
    CHECK(code_of(parse_list_query({{"labels", "owner"}})) == "invalid_argument");
    CHECK(code_of(parse_list_query({{"labels", ""}})) == "invalid_argument");
    CHECK(code_of(parse_list_query({{"labels", "=x"}})) == "invalid_argument");
    CHECK(code_of(parse_list_query({{"state", "asleep"}})) == "invalid_argument");
    CHECK(code_of(parse_list_query({{"state", "running,"}})) == "invalid_argument");
    CHECK(code_of(parse_list_query({{"label", "a=b"}})) == "invalid_argument");
}

TEST_CASE("sizes scale down to the host and explicit values beyond it are refused") {
    HostLimits host = two_cpu_host();
    auto shape = resolve_shape(parse_create("{}").value(), host);
    REQUIRE(shape.has_value());
    CHECK(shape->size == "default");
    CHECK(shape->cpus == 2);
    CHECK(shape->memory_mib == 7168);
    CHECK(shape->disk_gib == host.default_disk_gib);
    REQUIRE(shape->warnings.size() == 1);
    CHECK(shape->warnings[0].find("scaled down") != std::string::npos);

    shape = resolve_shape(parse_create(R"({"size":"small"})").value(), host);
    CHECK(shape->cpus == 2);
    CHECK(shape->memory_mib == 4096);
    CHECK(shape->warnings.empty());

    shape = resolve_shape(parse_create(R"({"cpus":1,"memoryMib":512,"diskGib":3})").value(), host);
    CHECK(shape->size == "custom");
    CHECK(shape->cpus == 1);
    CHECK(shape->memory_mib == 512);
    CHECK(shape->disk_gib == 3);

    CHECK(code_of(resolve_shape(parse_create(R"({"cpus":3})").value(), host)) == "invalid_argument");
    CHECK(code_of(resolve_shape(parse_create(R"({"memoryMib":8192})").value(), host)) == "invalid_argument");
    CHECK(code_of(resolve_shape(parse_create(R"({"memoryMib":128})").value(), host)) == "invalid_argument");
    CHECK(code_of(resolve_shape(parse_create(R"({"diskGib":4096})").value(), host)) == "invalid_argument");
}

TEST_CASE("the error format and the status of every code") {
    CHECK(status_for_code("bad_request") == 400);
    CHECK(status_for_code("invalid_argument") == 400);
    CHECK(status_for_code("unauthorized") == 401);
    CHECK(status_for_code("forbidden") == 403);
    CHECK(status_for_code("not_found") == 404);
    CHECK(status_for_code("invalid_state") == 409);
    CHECK(status_for_code("idempotency_conflict") == 409);
    CHECK(status_for_code("rate_limited") == 429);
    CHECK(status_for_code("limit_reached") == 429);
    CHECK(status_for_code("not_implemented") == 501);
    CHECK(status_for_code("no_ready_machine") == 502);
    CHECK(status_for_code("capacity_exceeded") == 503);
    CHECK(status_for_code("store") == 500);

    auto internal = to_api_error(make_coded_error("store", "disk I/O error"));
    CHECK(internal.status == 500);
    CHECK(internal.code == "internal");
    auto body = nlohmann::json::parse(
        error_body(to_api_error(make_coded_error("invalid_state", "sandbox is stopped")), "req_1"));
    CHECK(body == nlohmann::json{{"ok", false},
                                 {"status", 409},
                                 {"code", "invalid_state"},
                                 {"message", "sandbox is stopped"},
                                 {"requestId", "req_1"}});
}

TEST_CASE("ttl bodies: a length, noAutoStop, or nothing to renew with the sandbox's own") {
    auto empty = parse_ttl("");
    REQUIRE(empty.has_value());
    CHECK_FALSE(empty->ttl_seconds);
    CHECK_FALSE(empty->no_auto_stop);
    CHECK(parse_ttl(R"({"ttl":7200})")->ttl_seconds == 7200);
    CHECK(parse_ttl(R"({"noAutoStop":true})")->no_auto_stop);
    CHECK(parse_ttl(R"({"ttl":null,"noAutoStop":false})").has_value());
    CHECK(code_of(parse_ttl(R"({"ttl":30})")) == "invalid_argument");
    CHECK(message_of(parse_ttl(R"({"ttl":30})")).find("shorter than 60 s") != std::string::npos);
    CHECK(parse_ttl(R"({"ttl":30})", 1)->ttl_seconds == 30);  // sbxd --min-ttl-seconds 1
    CHECK(code_of(parse_ttl(R"({"ttl":0})", 1)) == "invalid_argument");
    CHECK(code_of(parse_ttl(R"({"ttl":2592001})")) == "invalid_argument");  // past 30 days
    CHECK(parse_ttl(R"({"ttl":2592000})")->ttl_seconds == kMaxTtlSeconds);
    CHECK(code_of(parse_ttl(R"({"ttl":"1h"})")) == "invalid_argument");
    CHECK(code_of(parse_ttl(R"({"ttl":600,"noAutoStop":true})")) == "invalid_argument");
    CHECK(message_of(parse_ttl(R"({"seconds":600})")).find("seconds") != std::string::npos);
    CHECK(code_of(parse_ttl("[]")) == "bad_request");
}

TEST_CASE("create's ttl has the same lowest length") {
    CHECK(code_of(parse_create(R"({"ttl":"20s"})")) == "invalid_argument");
    CHECK(parse_create(R"({"ttl":"20s"})", 1)->ttl_seconds == 20);
}

TEST_CASE("idle bodies: minutes, or 0 or null for off; the field is required") {
    CHECK(parse_idle(R"({"idleMinutes":15})")->idle_minutes == 15);
    CHECK_FALSE(parse_idle(R"({"idleMinutes":0})")->idle_minutes);
    CHECK_FALSE(parse_idle(R"({"idleMinutes":null})")->idle_minutes);
    CHECK(code_of(parse_idle("{}")) == "invalid_argument");
    CHECK(code_of(parse_idle("")) == "invalid_argument");
    CHECK(code_of(parse_idle(R"({"idleMinutes":-1})")) == "invalid_argument");
    CHECK(code_of(parse_idle(R"({"idleMinutes":43201})")) == "invalid_argument");
    CHECK(code_of(parse_idle(R"({"idleMinutes":"5"})")) == "invalid_argument");
    CHECK(code_of(parse_idle(R"({"idleMinutes":5,"x":1})")) == "invalid_argument");
}

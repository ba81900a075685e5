#include "host-tools/sbxd/store/store.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "host-tools/sbxd/store/schema.hpp"
#include "host-tools/sbxd/testing/temp_dir.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using sbx::sbxd::testing::open_store;

namespace {

SandboxRecord sample(const std::string& id, UnixMillis now = 1'000'000) {
    SandboxRecord s;
    s.id = id;
    s.name = id;
    s.from = "default";
    s.size = "small";
    s.cpus = 2;
    s.memory_mib = 4096;
    s.disk_gib = 8;
    s.labels = {{"owner", "alice"}, {"run", "42"}};
    s.env = {{"FOO", "bar"}};
    s.created_at = now;
    s.last_activity_at = now;
    s.auto_stop_at = now + 3'600'000;
    s.ttl_seconds = 3600;
    s.idle_minutes = 15;
    return s;
}

}  // namespace

TEST_CASE("a new store has the latest schema and reopening keeps it") {
    testing::TempDir dir{"sbxd-store"};
    {
        auto store = open_store(dir.db());
        CHECK(store->schema_version().value() == Store::latest_schema_version());
    }
    auto again = open_store(dir.db());
    CHECK(again->schema_version().value() == Store::latest_schema_version());
}

TEST_CASE("a version 3 file migrates: the auto-stop's length comes from its deadline") {
    testing::TempDir dir{"sbxd-store"};
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(dir.db().c_str(), &raw) == SQLITE_OK);
    std::string v3 =
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT;"
        "INSERT INTO schema_migrations VALUES (1, 0), (2, 0), (3, 0);";
    for (std::size_t i = 0; i < 3; ++i) {
        v3 += std::string(schema_migrations()[i]);
    }
    v3 +=
        "INSERT INTO sandboxes (id, name, state, source, size, cpus, memory_mib, disk_gib, labels, env,"
        " no_env, created_at, started_at, last_activity_at, auto_stop_at, idle_minutes) VALUES"
        " ('sbx_ttl', 'sbx_ttl', 'running', 'default', 'small', 2, 4096, 8, '{}', '{}', 0,"
        "  1000, 11000, 11000, 7211000, 5),"
        " ('sbx_off', 'sbx_off', 'stopped', 'default', 'small', 2, 4096, 8, '{}', '{}', 0,"
        "  1000, NULL, 1000, NULL, NULL);";
    REQUIRE(sqlite3_exec(raw, v3.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(raw);
    auto store = open_store(dir.db());
    CHECK(store->schema_version().value() == Store::latest_schema_version());
    auto ttl = store->get_sandbox("sbx_ttl").value();
    CHECK(ttl.auto_stop_at == 7'211'000);
    CHECK(ttl.ttl_seconds == 7200);
    CHECK(ttl.idle_minutes == 5);
    CHECK_FALSE(store->get_sandbox("sbx_off")->ttl_seconds.has_value());
}

TEST_CASE("a file from a newer sbxd is refused") {
    testing::TempDir dir{"sbxd-store"};
    { open_store(dir.db()); }
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(dir.db().c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw, "INSERT INTO schema_migrations VALUES (999, 0)", nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    sqlite3_close(raw);
    auto store = Store::open(dir.db());
    REQUIRE_FALSE(store.has_value());
    CHECK(store.error().message.find("newer") != std::string::npos);
}

TEST_CASE("sandboxes round-trip with every field") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    SandboxRecord s = sample("sbx_a");
    s.vmm = VmmProcess{1234, 5678, "/tmp/x/control.sock"};
    s.network = SandboxNetwork{7, "52:54:00:12:34:56"};
    s.egress = "allow:203.0.113.0/24";
    auto created = store->create_sandbox(s, std::nullopt);
    REQUIRE(created.has_value());
    CHECK_FALSE(created->replayed);
    CHECK(store->get_sandbox("sbx_a").value() == s);
    auto missing = store->get_sandbox("sbx_none");
    REQUIRE_FALSE(missing.has_value());
    CHECK(missing.error().code == "not_found");
    auto twice = store->create_sandbox(s, std::nullopt);
    REQUIRE_FALSE(twice.has_value());
    CHECK(twice.error().code == "already_exists");
}

TEST_CASE("a network is claimed once per sandbox, on a slot no other sandbox holds") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    REQUIRE(store->create_sandbox(sample("sbx_a"), std::nullopt));
    REQUIRE(store->create_sandbox(sample("sbx_b"), std::nullopt));
    std::vector<std::set<std::uint32_t>> seen;
    auto lowest_free = [&](const std::set<std::uint32_t>& used) -> Result<std::uint32_t> {
        seen.push_back(used);
        std::uint32_t slot = 0;
        while (used.contains(slot)) {
            ++slot;
        }
        return slot;
    };
    auto a = store->claim_network("sbx_a", lowest_free, "52:54:00:00:00:0a", 5);
    REQUIRE(a);
    CHECK(a->slot == 0);
    auto b = store->claim_network("sbx_b", lowest_free, "52:54:00:00:00:0b", 6);
    REQUIRE(b);
    CHECK(b->slot == 1);
    REQUIRE(seen.size() == 2);
    CHECK(seen[1] == std::set<std::uint32_t>{0});
    // A second claim returns the first; the picker is not asked.
    auto again = store->claim_network("sbx_a", lowest_free, "52:54:00:ff:ff:ff", 7);
    REQUIRE(again);
    CHECK(*again == *a);
    CHECK(seen.size() == 2);
    CHECK(store->get_sandbox("sbx_b")->network == SandboxNetwork{1, "52:54:00:00:00:0b"});
    // A picker's error is the claim's, and nothing is written.
    REQUIRE(store->create_sandbox(sample("sbx_c"), std::nullopt));
    auto full = store->claim_network(
        "sbx_c", [](const std::set<std::uint32_t>&) -> Result<std::uint32_t> {
            return make_coded_error("address_pool_exhausted", "no slot");
        },
        "52:54:00:00:00:0c", 8);
    REQUIRE_FALSE(full);
    CHECK(full.error().code == "address_pool_exhausted");
    CHECK_FALSE(store->get_sandbox("sbx_c")->network.has_value());
    // A slot taken twice is refused by the schema itself.
    auto twice = store->claim_network(
        "sbx_c", [](const std::set<std::uint32_t>&) -> Result<std::uint32_t> { return 0u; }, "52:54:00:00:00:0c",
        9);
    CHECK_FALSE(twice);
    auto missing = store->claim_network("sbx_none", lowest_free, "52:54:00:00:00:0d", 9);
    REQUIRE_FALSE(missing);
    CHECK(missing.error().code == "not_found");
}

TEST_CASE("the egress policy: internet by default, kept with or without a network, changed with an event") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    REQUIRE(store->create_sandbox(sample("sbx_a"), std::nullopt));
    CHECK(store->get_sandbox("sbx_a")->egress == "internet");
    REQUIRE(store->set_egress("sbx_a", "deny-all", 10));
    CHECK(store->get_sandbox("sbx_a")->egress == "deny-all");
    auto claimed = store->claim_network(
        "sbx_a", [](const std::set<std::uint32_t>&) -> Result<std::uint32_t> { return 3u; }, "52:54:00:00:00:0a", 11);
    REQUIRE(claimed);
    CHECK(store->get_sandbox("sbx_a")->egress == "deny-all");  // the claim keeps it
    REQUIRE(store->set_egress("sbx_a", "allow:198.51.100.0/24", 12));
    CHECK(store->get_sandbox("sbx_a")->egress == "allow:198.51.100.0/24");
    CHECK(store->get_sandbox("sbx_a")->network == SandboxNetwork{3, "52:54:00:00:00:0a"});
    auto missing = store->set_egress("sbx_none", "deny-all", 13);
    REQUIRE_FALSE(missing);
    CHECK(missing.error().code == "not_found");
}

TEST_CASE("list filters by every label given and by any of the states") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    SandboxRecord a = sample("sbx_a", 1);
    SandboxRecord b = sample("sbx_b", 2);
    b.labels = {{"owner", "bob"}};
    SandboxRecord c = sample("sbx_c", 3);
    c.labels = {{"owner", "alice"}};
    for (const auto& s : {a, b, c}) {
        REQUIRE(store->create_sandbox(s, std::nullopt).has_value());
    }
    REQUIRE(store->change_state("sbx_b", {SandboxState::Running, 10, std::nullopt}).has_value());

    auto ids = [&](const SandboxFilter& f) {
        std::vector<std::string> out;
        auto listed = store->list_sandboxes(f);
        REQUIRE(listed.has_value());
        for (const auto& s : *listed) {
            out.push_back(s.id);
        }
        return out;
    };
    CHECK(ids({}) == std::vector<std::string>{"sbx_a", "sbx_b", "sbx_c"});
    CHECK(ids({{{"owner", "alice"}}, {}}) == std::vector<std::string>{"sbx_a", "sbx_c"});
    CHECK(ids({{{"owner", "alice"}, {"run", "42"}}, {}}) == std::vector<std::string>{"sbx_a"});
    CHECK(ids({{{"owner", "carol"}}, {}}).empty());
    CHECK(ids({{}, {SandboxState::Running}}) == std::vector<std::string>{"sbx_b"});
    CHECK(ids({{}, {SandboxState::Running, SandboxState::Creating}}) ==
          std::vector<std::string>{"sbx_a", "sbx_b", "sbx_c"});
    CHECK(ids({{{"owner", "alice"}}, {SandboxState::Running}}).empty());
}

TEST_CASE("sandboxes made in the same millisecond list in the order they were made") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    for (const char* id : {"sbx_c", "sbx_a", "sbx_b"}) {  // a fork's children: random ids, one time
        REQUIRE(store->create_sandbox(sample(id, 5), std::nullopt).has_value());
    }
    auto sandboxes = store->list_sandboxes({});
    REQUIRE(sandboxes.has_value());
    std::vector<std::string> listed;
    for (const auto& s : *sandboxes) {
        listed.push_back(s.id);
    }
    CHECK(listed == std::vector<std::string>{"sbx_c", "sbx_a", "sbx_b"});
}

TEST_CASE("state changes follow the state machine, set start times and clear the VMM") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    REQUIRE(store->create_sandbox(sample("sbx_a"), std::nullopt).has_value());
    VmmProcess vmm{42, 777, "/run/x.sock"};
    auto running = store->change_state("sbx_a", {SandboxState::Running, 2'000'000, vmm});
    REQUIRE(running.has_value());
    CHECK(running->started_at == 2'000'000);
    CHECK(running->last_activity_at == 2'000'000);
    CHECK(running->vmm == vmm);

    auto refused = store->change_state("sbx_a", {SandboxState::Stopped, 2'000'001, std::nullopt});
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == "invalid_state");
    CHECK(store->get_sandbox("sbx_a")->state == SandboxState::Running);

    REQUIRE(store->change_state("sbx_a", {SandboxState::Stopping, 2'000'002, std::nullopt}).has_value());
    CHECK(store->get_sandbox("sbx_a")->vmm == vmm);  // still there while it saves
    auto stopped = store->change_state("sbx_a", {SandboxState::Stopped, 2'000'003, std::nullopt});
    REQUIRE(stopped.has_value());
    CHECK_FALSE(stopped->vmm.has_value());
    CHECK(store->get_sandbox("sbx_a").value() == *stopped);

    auto events = store->list_events(0, 100).value();
    REQUIRE(events.size() == 4);
    CHECK(events[0].type == "created");
    CHECK(events[3].type == "state");
    CHECK(events[3].data == R"({"from":"stopping","to":"stopped"})");
    CHECK(store->list_events(events[1].id, 100)->size() == 2);

    auto missing = store->change_state("sbx_none", {SandboxState::Running, 1, std::nullopt});
    CHECK(missing.error().code == "not_found");
}

TEST_CASE("touch, auto-stop and idle updates") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    REQUIRE(store->create_sandbox(sample("sbx_a"), std::nullopt).has_value());
    REQUIRE(store->touch("sbx_a", 5'000'000).has_value());
    REQUIRE(store->touch("sbx_a", 4'000'000).has_value());  // an older report never moves it back
    REQUIRE(store->set_auto_stop("sbx_a", AutoStop{}, 5'000'000).has_value());
    REQUIRE(store->set_idle_minutes("sbx_a", 3, 4'500'000).has_value());
    auto s = store->get_sandbox("sbx_a").value();
    CHECK(s.last_activity_at == 5'000'000);
    CHECK_FALSE(s.auto_stop_at.has_value());
    CHECK_FALSE(s.ttl_seconds.has_value());
    CHECK(s.idle_minutes == 3);
    CHECK(store->touch("sbx_none", 1).error().code == "not_found");

    REQUIRE(store->set_auto_stop("sbx_a", AutoStop{6'000'000, 600}, 5'400'000).has_value());
    REQUIRE(store->set_idle_minutes("sbx_a", std::nullopt, 5'500'000).has_value());
    s = store->get_sandbox("sbx_a").value();
    CHECK(s.auto_stop_at == 6'000'000);
    CHECK(s.ttl_seconds == 600);
    CHECK_FALSE(s.idle_minutes.has_value());
    CHECK(s.last_activity_at == 5'500'000);  // a new idle setting counts from now
    auto events = store->list_events(0, 100).value();
    REQUIRE(events.size() == 5);
    CHECK(events[3].type == "auto_stop");
    CHECK(events[3].data == R"({"autoStopAt":6000000,"ttlSeconds":600})");
    CHECK(events[4].type == "idle");
    CHECK(events[4].data == R"({"idleMinutes":null})");
    CHECK(store->set_auto_stop("sbx_none", AutoStop{}, 1).error().code == "not_found");
}

TEST_CASE("a resized resume records the new shape, disk included") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    REQUIRE(store->create_sandbox(sample("sbx_a"), std::nullopt).has_value());
    REQUIRE(store->set_shape("sbx_a", "large", 4, 8192, 20).has_value());
    const auto s = store->get_sandbox("sbx_a").value();
    CHECK(s.size == "large");
    CHECK(s.cpus == 4);
    CHECK(s.memory_mib == 8192);
    CHECK(s.disk_gib == 20);
    CHECK(store->set_shape("sbx_none", "small", 1, 512, 8).error().code == "not_found");
}

TEST_CASE("idempotency keys replay the same body, refuse another, and expire after 24 h") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    const UnixMillis t0 = 10'000'000'000;
    IdempotencyClaim claim{"key-1", "hash-a"};
    auto first = store->create_sandbox(sample("sbx_a", t0), claim);
    REQUIRE(first.has_value());
    CHECK_FALSE(first->replayed);

    auto replay = store->create_sandbox(sample("sbx_b", t0 + 1000), claim);
    REQUIRE(replay.has_value());
    CHECK(replay->replayed);
    CHECK(replay->sandbox.id == "sbx_a");
    CHECK(store->list_sandboxes({})->size() == 1);

    auto conflict = store->create_sandbox(sample("sbx_c", t0 + 2000), IdempotencyClaim{"key-1", "hash-b"});
    REQUIRE_FALSE(conflict.has_value());
    CHECK(conflict.error().code == "idempotency_conflict");
    CHECK(store->list_sandboxes({})->size() == 1);

    auto later = store->create_sandbox(sample("sbx_d", t0 + kIdempotencyKeyLifetimeMs + 1), claim);
    REQUIRE(later.has_value());
    CHECK_FALSE(later->replayed);
    CHECK(later->sandbox.id == "sbx_d");
}

TEST_CASE("fork keys replay the children, refuse another body, forget deleted children and expire") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    const UnixMillis now = 1'000'000;
    const IdempotencyClaim claim{"fork-1", "hash-a"};
    CHECK(store->find_fork_claim(claim, now).value().empty());
    for (const char* id : {"sbx_c1", "sbx_c2"}) {
        REQUIRE(store->create_sandbox(sample(id), std::nullopt).has_value());
        REQUIRE(store->add_fork_child(claim, id, now).has_value());
    }
    auto children = store->find_fork_claim(claim, now + 1000).value();
    REQUIRE(children.size() == 2);
    CHECK(children[0].id == "sbx_c1");
    CHECK(children[1].id == "sbx_c2");
    auto other = store->find_fork_claim({"fork-1", "hash-b"}, now);
    REQUIRE_FALSE(other.has_value());
    CHECK(other.error().code == "idempotency_conflict");
    REQUIRE(store->delete_sandbox("sbx_c1", now).has_value());
    CHECK(store->find_fork_claim(claim, now).value().size() == 1);
    CHECK(store->find_fork_claim(claim, now + kIdempotencyKeyLifetimeMs).value().empty());
    CHECK(store->prune(now + kIdempotencyKeyLifetimeMs).value() >= 1);
    CHECK(store->find_fork_claim(claim, now).value().empty());
    // A create's key is looked up without inserting anything.
    REQUIRE(store->create_sandbox(sample("sbx_k"), IdempotencyClaim{"create-1", "h"}).has_value());
    CHECK(store->find_create_claim({"create-1", "h"}, now).value()->id == "sbx_k");
    CHECK(store->find_create_claim({"create-1", "other"}, now).error().code == "idempotency_conflict");
    CHECK_FALSE(store->find_create_claim({"create-2", "h"}, now).value().has_value());
}

TEST_CASE("deleting a sandbox takes its keys and history and leaves named snapshots") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    REQUIRE(store->create_sandbox(sample("sbx_a"), IdempotencyClaim{"k", "h"}).has_value());
    REQUIRE(store->add_api_key({"key_1", "ab12", "guest", "sbx_a", 1}).has_value());
    REQUIRE(store->add_api_key({"key_2", "cd34", "admin", std::nullopt, 2}).has_value());
    REQUIRE(store->add_snapshot({"base", "sbx_a", true, "default", 8, 3}).has_value());
    auto exec_id = store->add_exec("sbx_a", R"(["ls","-l"])", 4);
    REQUIRE(exec_id.has_value());
    REQUIRE(store->finish_exec(*exec_id, 0).has_value());
    CHECK(store->list_execs("sbx_a")->size() == 1);

    REQUIRE(store->delete_sandbox("sbx_a", 5).has_value());
    CHECK(store->get_sandbox("sbx_a").error().code == "not_found");
    CHECK_FALSE(store->find_api_key("ab12")->has_value());
    CHECK(store->find_api_key("cd34")->has_value());
    CHECK(store->list_execs("sbx_a")->empty());
    CHECK(store->get_snapshot("base").has_value());
    CHECK(store->delete_sandbox("sbx_a", 6).error().code == "not_found");
    // The key is free again with the sandbox gone.
    CHECK_FALSE(store->create_sandbox(sample("sbx_b"), IdempotencyClaim{"k", "other"})->replayed);
}

TEST_CASE("hosted ports: one subdomain per sandbox, tokens kept on update, gone with the sandbox") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    REQUIRE(store->create_sandbox(sample("sbx_a"), std::nullopt).has_value());
    REQUIRE(store->create_sandbox(sample("sbx_b"), std::nullopt).has_value());
    auto hosted = [](std::string id, std::uint16_t port, std::string sub, std::string token) {
        return HostedPortRecord{std::move(id), port, std::move(sub), std::move(token), false, false, 7};
    };
    auto a8080 = store->host_port(hosted("sbx_a", 8080, "aaaa", "t1"));
    REQUIRE(a8080.has_value());
    CHECK(a8080->subdomain == "aaaa");
    // A second port keeps the sandbox's subdomain; its own token.
    auto a3000 = store->host_port(hosted("sbx_a", 3000, "zzzz", "t2"));
    REQUIRE(a3000.has_value());
    CHECK(a3000->subdomain == "aaaa");
    CHECK(a3000->token == "t2");
    // Hosting again changes the flags and keeps the token.
    auto again = hosted("sbx_a", 8080, "yyyy", "t3");
    again.is_public = true;
    auto updated = store->host_port(again);
    REQUIRE(updated.has_value());
    CHECK(updated->token == "t1");
    CHECK(updated->is_public);
    CHECK(store->find_hosted_port("aaaa", 8080)->is_public);
    CHECK(store->find_hosted_port("aaaa", 9).error().code == "not_found");
    // Another sandbox cannot take a subdomain in use.
    CHECK(store->host_port(hosted("sbx_b", 8080, "aaaa", "t4")).error().code == "already_exists");
    CHECK(store->host_port(hosted("sbx_nope", 1, "bbbb", "t5")).error().code == "not_found");
    CHECK(store->list_hosted_ports(std::nullopt)->size() == 2);
    CHECK(store->list_hosted_ports(std::string("sbx_b"))->empty());

    REQUIRE(store->unhost_port("sbx_a", 3000).has_value());
    CHECK(store->unhost_port("sbx_a", 3000).error().code == "not_found");
    REQUIRE(store->delete_sandbox("sbx_a", 8).has_value());
    CHECK(store->list_hosted_ports(std::nullopt)->empty());
    CHECK(store->find_hosted_port("aaaa", 8080).error().code == "not_found");
}

TEST_CASE("API keys are found by hash and scoped keys need their sandbox") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    ApiKeyRecord host{"key_1", "hash1", "ci", std::nullopt, 10};
    REQUIRE(store->add_api_key(host).has_value());
    CHECK(store->find_api_key("hash1").value() == host);
    CHECK_FALSE(store->find_api_key("hash2")->has_value());
    CHECK(store->add_api_key({"key_1", "hash9", "x", std::nullopt, 11}).error().code == "already_exists");
    CHECK(store->add_api_key({"key_2", "hash2", "x", "sbx_none", 11}).error().code == "not_found");
    CHECK(store->list_api_keys()->size() == 1);
    REQUIRE(store->remove_api_key("key_1").has_value());
    CHECK(store->remove_api_key("key_1").error().code == "not_found");
}

TEST_CASE("a key's read-only flag and expiry round-trip; an exec keeps the key it came with") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    REQUIRE(store->create_sandbox(sample("sbx_a"), std::nullopt).has_value());
    ApiKeyRecord viewer{"key_r", "hashr", "dashboard", std::nullopt, 10, true, 86'400'010};
    ApiKeyRecord guest{"key_g", "hashg", "guest", "sbx_a", 10, false, std::nullopt};
    REQUIRE(store->add_api_key(viewer).has_value());
    REQUIRE(store->add_api_key(guest).has_value());
    CHECK(store->find_api_key("hashr").value() == viewer);
    CHECK(store->find_api_key("hashg").value() == guest);
    // by time, then in the order they were made (not by id: "key_g" < "key_r")
    CHECK(store->list_api_keys().value() == std::vector<ApiKeyRecord>{viewer, guest});
    REQUIRE(store->add_exec("sbx_a", R"(["id"])", 20, std::string("key_g")).has_value());
    REQUIRE(store->add_exec("sbx_a", R"(["ls"])", 21).has_value());
    auto execs = store->list_execs("sbx_a").value();
    REQUIRE(execs.size() == 2);
    CHECK(execs[0].key_id == "key_g");
    CHECK_FALSE(execs[1].key_id.has_value());
}

TEST_CASE("named snapshots: unique names, list, remove; machine, size and CPU signature kept") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    SnapshotRecord snap{"py-ready", "sbx_gone", true, "default", 8, 100, 2, 4096, 1 << 30, "GenuineIntel/6/85/7/ab"};
    REQUIRE(store->add_snapshot(snap).has_value());
    CHECK(store->get_snapshot("py-ready").value() == snap);
    CHECK(store->add_snapshot(snap).error().code == "already_exists");
    SnapshotRecord disk_only{"disk", "sbx_a", false, "default", 8, 200};
    REQUIRE(store->add_snapshot(disk_only).has_value());
    auto all = store->list_snapshots().value();
    REQUIRE(all.size() == 2);
    CHECK(all[0] == snap);  // oldest first
    CHECK(all[1].cpu_signature.empty());
    REQUIRE(store->remove_snapshot("py-ready").has_value());
    CHECK(store->get_snapshot("py-ready").error().code == "not_found");
    CHECK(store->remove_snapshot("py-ready").error().code == "not_found");
}

TEST_CASE("prune drops what outlived its retention and nothing else") {
    testing::TempDir dir{"sbxd-store"};
    auto store = open_store(dir.db());
    const UnixMillis now = 100LL * 24 * 3600 * 1000;
    REQUIRE(store->create_sandbox(sample("sbx_a", now), IdempotencyClaim{"k", "h"}).has_value());
    REQUIRE(store->add_exec("sbx_a", "[\"old\"]", now - kExecHistoryLifetimeMs - 1).has_value());
    REQUIRE(store->add_exec("sbx_a", "[\"new\"]", now - 1).has_value());
    CHECK(store->prune(now).value() == 1);
    auto execs = store->list_execs("sbx_a").value();
    REQUIRE(execs.size() == 1);
    CHECK(execs[0].command == "[\"new\"]");
    // A day later the idempotency key and, a week later, the event go.
    CHECK(store->prune(now + kIdempotencyKeyLifetimeMs).value() == 1);
    CHECK(store->prune(now + kEventLifetimeMs).value() == 1);
    CHECK(store->list_events(0, 10)->empty());
}

TEST_CASE("a crash in the middle of a transaction leaves the state before it") {
    testing::TempDir dir{"sbxd-store"};
    {
        auto store = open_store(dir.db());
        REQUIRE(store->create_sandbox(sample("sbx_kept"), std::nullopt).has_value());
    }
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // A writer that gets far into a large transaction (enough pages to
        // spill from the cache into the WAL) and is killed before COMMIT.
        sqlite3* db = nullptr;
        if (sqlite3_open(dir.db().c_str(), &db) != SQLITE_OK) {
            ::_exit(2);
        }
        sqlite3_exec(db, "PRAGMA cache_size=8", nullptr, nullptr, nullptr);
        sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
        sqlite3_exec(db, "UPDATE sandboxes SET state = 'deleting', name = 'torn' WHERE id = 'sbx_kept'",
                     nullptr, nullptr, nullptr);
        for (int i = 0; i < 2000; ++i) {
            std::string sql =
                "INSERT INTO events (sandbox_id, type, data, at) VALUES ('sbx_kept', 'junk', '" +
                std::string(500, 'x') + "', " + std::to_string(i) + ")";
            if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
                ::_exit(3);
            }
        }
        ::kill(::getpid(), SIGKILL);
        ::_exit(4);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    CHECK(std::filesystem::file_size(dir.db() + "-wal") > 500'000);  // the writes did reach the file

    auto store = open_store(dir.db());
    auto kept = store->get_sandbox("sbx_kept");
    REQUIRE(kept.has_value());
    CHECK(kept.value() == sample("sbx_kept"));
    CHECK(store->list_events(0, 5000)->size() == 1);  // only the "created" event
    // And the file is writable again: the dead writer's lock is gone.
    REQUIRE(store->create_sandbox(sample("sbx_next"), std::nullopt).has_value());
}

TEST_CASE("a transaction that committed before the crash is kept whole") {
    testing::TempDir dir{"sbxd-store"};
    { open_store(dir.db()); }
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        auto store = Store::open(dir.db());
        if (!store || !(*store)->create_sandbox(sample("sbx_done"), IdempotencyClaim{"k", "h"})) {
            ::_exit(2);
        }
        ::kill(::getpid(), SIGKILL);
        ::_exit(3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    auto store = open_store(dir.db());
    CHECK(store->get_sandbox("sbx_done").value() == sample("sbx_done"));
    CHECK(store->create_sandbox(sample("sbx_other"), IdempotencyClaim{"k", "h"})->replayed);
}

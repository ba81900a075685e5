// GET/PUT /v1/sandboxes/{id}/files/tar without a guest: what the routes
// refuse before reaching an agent, and a stopped sandbox's tree read from
// its disk (an ext4 image made here with mkfs.ext4 -d) into the layout
// tar_get gives, checked with the agent's own tar reader.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "guest-agent/files/tar_reader.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/testing/api_fixture.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using nlohmann::json;

namespace {

struct DiskDriver final : testing::UnusedDriver {
    std::string disk_path;
    Result<AgentAddress> agent(const std::string&) override {
        return make_coded_error("invalid_state", "not running");
    }
    Result<std::string> disk(const std::string&) override { return disk_path; }
};

struct Fixture {
    testing::TempDir tmp{"sbxd-tar"};
    std::string dir = tmp.path();
    std::unique_ptr<Store> store = testing::open_store(tmp.db());
    DiskDriver driver;
    std::unique_ptr<ApiService> service;

    Fixture() {
        service = std::make_unique<ApiService>(*store, driver, DaemonInfo{"host-a", "test", "/images", {}},
                                               [] { return UnixMillis{1'700'000'000'000}; });
        for (const char* id : {"sbx_run", "sbx_off"}) {
            auto s = testing::add_sandbox(*store, id);
            REQUIRE(store->change_state(id, {SandboxState::Running, s.created_at, std::nullopt}).has_value());
        }
        for (auto state : {SandboxState::Stopping, SandboxState::Stopped}) {
            REQUIRE(store->change_state("sbx_off", {state, 1'700'000'000'000, std::nullopt}).has_value());
        }
    }

    http::Response call(const std::string& method, const std::string& target) const {
        auto request = testing::api_request(method, target);
        request.body_stream = std::make_shared<http::BodyReader>(1 << 16, [] {});
        request.body_stream->finish();
        return service->handle(std::move(request));
    }
};

json body_of(const http::Response& response) {
    return json::parse(response.body);
}

struct Archived {
    char type = '?';
    std::uint32_t mode = 0;
    std::string content;  // a file's; a symlink's target
};

// The streamed archive, read back by the agent's tar reader.
std::map<std::string, Archived> read_archive(const http::Response& response) {
    REQUIRE(response.status == 200);
    REQUIRE(static_cast<bool>(response.stream));
    http::BodyWriter writer(std::size_t{64} << 20, [] {});
    response.stream(writer);
    REQUIRE_FALSE(writer.cancelled());
    struct Collect final : agent::tar::TarEntryHandler {
        std::map<std::string, Archived> entries;
        std::string current;
        Result<void> begin_entry(const agent::tar::Entry& e) override {
            current = e.path;
            char type = e.type == agent::tar::EntryType::File        ? 'f'
                        : e.type == agent::tar::EntryType::Directory ? 'd'
                        : e.type == agent::tar::EntryType::Symlink   ? 'l'
                                                                     : 'o';
            CHECK_MESSAGE(entries.count(e.path) == 0, e.path);
            entries[e.path] = Archived{type, e.mode, e.link_target};
            return ok();
        }
        Result<void> entry_data(std::span<const std::uint8_t> b) override {
            entries[current].content.append(reinterpret_cast<const char*>(b.data()), b.size());
            return ok();
        }
        Result<void> end_entry() override { return ok(); }
    } collect;
    agent::tar::TarReader reader(collect);
    while (auto chunk = writer.take()) {
        REQUIRE(reader.feed(std::span(reinterpret_cast<const std::uint8_t*>(chunk->data()), chunk->size())));
    }
    REQUIRE(reader.finish());
    return collect.entries;
}

bool have_mkfs() {
    return std::system("PATH=$PATH:/sbin:/usr/sbin command -v mkfs.ext4 >/dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE("files/tar: the path is required, absolute and alone; 404 for no sandbox") {
    Fixture f;
    for (const char* method : {"GET", "PUT"}) {
        for (const char* query : {"", "?path=", "?path=root/x", "?path=/a&path=/b", "?path=/a&mode=0644"}) {
            auto r = f.call(method, std::string("/v1/sandboxes/sbx_run/files/tar") + query);
            CHECK_MESSAGE(r.status == 400, method, query);
            CHECK_MESSAGE(body_of(r)["code"] == "invalid_argument", method, query);
        }
        auto none = f.call(method, "/v1/sandboxes/sbx_nope/files/tar?path=/root");
        CHECK(none.status == 404);
        CHECK(body_of(none)["code"] == "not_found");
    }
    // A running sandbox is its agent's (this driver has none running).
    CHECK(body_of(f.call("GET", "/v1/sandboxes/sbx_run/files/tar?path=/root"))["code"] == "invalid_state");
    // An upload needs the guest: a stopped sandbox says to resume it.
    auto stopped = f.call("PUT", "/v1/sandboxes/sbx_off/files/tar?path=/root/d");
    CHECK(stopped.status == 409);
    CHECK(body_of(stopped)["code"] == "invalid_state");
    CHECK(body_of(stopped)["message"].get<std::string>().find("resume") != std::string::npos);
}

TEST_CASE("files/tar of a stopped sandbox is read from its disk, laid out as tar_get's") {
    if (!have_mkfs()) {
        MESSAGE("skipped: mkfs.ext4 (e2fsprogs) is not installed");
        return;
    }
    Fixture f;
    const std::string tree = f.dir + "/tree";
    std::filesystem::create_directories(tree + "/root/proj/src/deep");
    std::filesystem::create_directories(tree + "/root/proj/empty");
    std::string big(700 * 1024 + 3, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) {
        big[i] = static_cast<char>(i * 7 + (i >> 11));
    }
    std::ofstream(tree + "/root/proj/big.bin", std::ios::binary) << big;
    std::ofstream(tree + "/root/proj/src/main.c") << "int main(void) { return 0; }\n";
    std::ofstream(tree + "/root/proj/src/deep/note") << "deep\n";
    std::ofstream(tree + "/root/proj/zero");
    ::chmod((tree + "/root/proj/src/main.c").c_str(), 0750);
    std::filesystem::create_symlink("src/main.c", tree + "/root/proj/link");
    std::filesystem::create_symlink("/root/proj", tree + "/root/plink");
    const std::string image = f.dir + "/disk.ext4";
    REQUIRE(std::system(("PATH=$PATH:/sbin:/usr/sbin mkfs.ext4 -q -F -d " + tree + " " + image +
                         " 16M >/dev/null 2>&1")
                            .c_str()) == 0);
    f.driver.disk_path = image;
    const std::string base = "/v1/sandboxes/sbx_off/files/tar?path=";

    auto entries = read_archive(f.call("GET", base + "/root/proj"));
    std::vector<std::string> names;
    for (const auto& [name, e] : entries) {
        names.push_back(name);
    }
    CHECK(names == std::vector<std::string>{"big.bin", "empty/", "link", "src/", "src/deep/", "src/deep/note",
                                            "src/main.c", "zero"});
    CHECK(entries["big.bin"].content == big);
    CHECK(entries["big.bin"].type == 'f');
    CHECK(entries["empty/"].type == 'd');
    CHECK(entries["link"].type == 'l');
    CHECK(entries["link"].content == "src/main.c");
    CHECK(entries["src/main.c"].mode == 0750);
    CHECK(entries["src/deep/note"].content == "deep\n");
    CHECK(entries["zero"].content.empty());

    // A symlink given as the path is followed; one file is one entry by its name.
    CHECK(read_archive(f.call("GET", base + "/root/plink")).size() == entries.size());
    auto one = read_archive(f.call("GET", base + "/root/proj/src/main.c"));
    REQUIRE(one.size() == 1);
    CHECK(one.begin()->first == "main.c");
    CHECK(one.begin()->second.content == "int main(void) { return 0; }\n");

    auto missing = f.call("GET", base + "/root/nope");
    CHECK(missing.status == 404);
    CHECK(body_of(missing)["code"] == "not_found");
}

// The desktop ops through the real agent (socket pairs) and the host
// client, without an X server: status with none running, actions refused
// as not_running, desktop_start's checks (fields, user, programs), and the
// session going on after each error. desktop_x_test.cpp runs a real one.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/desktop/desktop_client.hpp"
#include "guest-agent/desktop/desktop_run.hpp"
#include "guest-agent/desktop/desktop_service.hpp"
#include "guest-agent/exec/exec_request.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

void still_serves(AgentClient& client) {
    auto health = client.health();
    CHECK_MESSAGE(health, (health ? "" : health.error().to_string()));
}

}  // namespace

TEST_CASE("desktop_status with no desktop") {
    AgentHarness h;
    auto client = h.connect();
    auto raw = client.call("desktop_status");
    REQUIRE(raw);
    CHECK((*raw)["running"] == false);
    CHECK((*raw)["display"].is_null());
    CHECK((*raw)["vnc_port"].is_null());
    auto status = desktop_status(client);
    REQUIRE_MESSAGE(status, (status ? "" : status.error().to_string()));
    CHECK_FALSE(status->running);
    CHECK(status->display == 0);
    CHECK(status->vnc_port == 0);
    CHECK_FALSE(status->session_running);
}

TEST_CASE("actions without a desktop are not_running, images too") {
    AgentHarness h;
    auto client = h.connect();
    auto click = desktop_action(client, Json{{"action", "left_click"}, {"coordinate", {1, 1}}});
    REQUIRE_FALSE(click);
    CHECK(error_code(click.error()) == "not_running");
    auto shot = desktop_action(client, Json{{"action", "screenshot"}});
    REQUIRE_FALSE(shot);
    CHECK(error_code(shot.error()) == "not_running");
    auto zoom = desktop_image(client, Json{{"action", "zoom"}, {"region", {0, 0, 1, 1}}});
    REQUIRE_FALSE(zoom);
    CHECK(error_code(zoom.error()) == "not_running");
    still_serves(client);
}

TEST_CASE("the client refuses what is no action before sending") {
    AgentHarness h;
    auto client = h.connect();
    auto not_object = desktop_action(client, Json::array());
    REQUIRE_FALSE(not_object);
    CHECK(not_object.error().code == "bad_request");
    auto not_image = desktop_image(client, Json{{"action", "left_click"}});
    REQUIRE_FALSE(not_image);
    CHECK(not_image.error().code == "bad_request");
    still_serves(client);
}

TEST_CASE("desktop_start refuses bad fields and an unknown user") {
    AgentHarness h;
    auto client = h.connect();
    for (const Json& fields : {Json{{"display", 100}}, Json{{"width", 10}}, Json{{"height", "800"}},
                               Json{{"user", 3}}}) {
        auto r = client.call("desktop_start", fields);
        REQUIRE_FALSE(r);
        CHECK_MESSAGE(error_code(r.error()) == "bad_request", fields.dump());
    }
    auto r = desktop_start(client, DesktopStartOptions{.display = 97, .user = "no-such-user-sbx"});
    REQUIRE_FALSE(r);
    CHECK(error_code(r.error()) == "not_found");
    still_serves(client);
}

TEST_CASE("desktop_start names a missing program") {
    // The agent looks on exec's PATH; where everything is installed this
    // would start a real desktop, which desktop_x_test does with its own.
    std::string missing;
    for (const char* program : {"Xtigervnc", "dbus-launch", "startxfce4"}) {
        if (missing.empty() && !find_program(program, kDefaultPath)) {
            missing = program;
        }
    }
    if (missing.empty()) {
        MESSAGE("skipped: Xtigervnc, dbus-launch and startxfce4 are all installed here");
        return;
    }
    AgentHarness h;
    auto client = h.connect();
    auto r = desktop_start(client, DesktopStartOptions{.display = 97, .user = "root"});
    REQUIRE_FALSE(r);
    CHECK(error_code(r.error()) == "not_installed");
    CHECK_MESSAGE(r.error().message.find(missing) != std::string::npos, r.error().message);
    auto status = desktop_status(client);
    REQUIRE(status);
    CHECK_FALSE(status->running);
    still_serves(client);
}

TEST_CASE("the session's runtime directory: made 0700 for the user, reused, refused when not its own") {
    char name[] = "/tmp/sbx-desktop-run.XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    const std::string base = std::string(name) + "/user";  // made too
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    auto dir = prepare_runtime_dir(base, uid, gid);
    REQUIRE_MESSAGE(dir, (dir ? "" : dir.error().to_string()));
    CHECK(*dir == base + "/" + std::to_string(uid));
    struct stat st {};
    REQUIRE(::lstat(dir->c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 07777) == 0700);
    CHECK(st.st_uid == uid);
    auto again = prepare_runtime_dir(base, uid, gid);
    REQUIRE(again);
    CHECK(*again == *dir);

    SUBCASE("a directory another session opened up") {
        REQUIRE(::chmod(dir->c_str(), 0755) == 0);
        auto r = prepare_runtime_dir(base, uid, gid);
        REQUIRE_FALSE(r);
        CHECK(r.error().code == "start_failed");
    }
    SUBCASE("a symlink in its place") {
        REQUIRE(::rmdir(dir->c_str()) == 0);
        REQUIRE(::symlink(name, dir->c_str()) == 0);
        auto r = prepare_runtime_dir(base, uid, gid);
        REQUIRE_FALSE(r);
        CHECK(r.error().code == "start_failed");
        ::unlink(dir->c_str());
    }
    std::filesystem::remove_all(name);
}

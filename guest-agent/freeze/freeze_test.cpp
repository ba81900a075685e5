// The freeze and thaw ops against a fake kernel: which mounts, in which
// order, a failure rolled back, the watchdog's own thaw, the client, and
// that an agent given no kernel refuses.
#include <doctest/doctest.h>

#include <thread>

#include "guest-agent/agent/agent_test_util.hpp"
#include "guest-agent/freeze/freeze_client.hpp"
#include "guest-agent/freeze/freeze_state.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

constexpr const char* kMounts =
    "/dev/vda / ext4 rw,relatime 0 0\n"
    "proc /proc proc rw,nosuid 0 0\n"
    "tmpfs /tmp tmpfs rw 0 0\n"
    "/dev/vdb /data xfs rw,noatime 0 0\n"
    "/dev/vdc /srv/read\\040only ext4 ro,relatime 0 0\n"
    "/dev/vdd /srv/with\\040space ext4 rw 0 0\n"
    "/dev/vda /var/bind ext4 rw,relatime 0 0\n"
    "/dev/vda / ext4 rw,relatime 0 0\n"
    "garbage\n";

}  // namespace

TEST_CASE("freeze_targets: writable disk file systems, the last mounted first") {
    CHECK(freeze_targets(kMounts) ==
          std::vector<std::string>{"/var/bind", "/srv/with space", "/data", "/"});
    CHECK(freeze_targets("").empty());
    CHECK(freeze_targets("/dev/vda / ext4 rw,errors=remount-ro 0 0\n") == std::vector<std::string>{"/"});
}

TEST_CASE("freeze then thaw every writable file system, through the client") {
    AgentHarness h;
    h.freeze_kernel->mount_table = kMounts;
    auto client = h.connect();
    auto frozen = freeze_filesystems(client);
    REQUIRE_MESSAGE(frozen.has_value(), frozen.error().to_string());
    CHECK(*frozen == std::vector<std::string>{"/var/bind", "/srv/with space", "/data", "/"});
    CHECK(h.freeze_kernel->frozen.size() == 4);
    // Again: nothing new to freeze (EBUSY), and that is no error.
    auto again = freeze_filesystems(client);
    REQUIRE(again.has_value());
    CHECK(again->empty());
    auto thawed = thaw_filesystems(client);
    REQUIRE(thawed.has_value());
    CHECK(*thawed == std::vector<std::string>{"/", "/data", "/srv/with space", "/var/bind"});
    CHECK(h.freeze_kernel->frozen.empty());
    auto idle = thaw_filesystems(client);  // nothing frozen: fine
    REQUIRE(idle.has_value());
    CHECK(idle->empty());
}

TEST_CASE("a failed freeze thaws what it froze and says which mount failed") {
    AgentHarness h;
    h.freeze_kernel->mount_table = kMounts;
    h.freeze_kernel->fail_on = "/data";
    auto client = h.connect();
    auto frozen = freeze_filesystems(client);
    REQUIRE_FALSE(frozen.has_value());
    CHECK(error_code(frozen.error()) == "io_error");
    CHECK(frozen.error().message.find("/data") != std::string::npos);
    CHECK(h.freeze_kernel->frozen.empty());
    CHECK(client.health().has_value());  // the session goes on
}

TEST_CASE("timeout_ms is checked, and the guest thaws by itself when no thaw comes") {
    AgentHarness h;
    h.freeze_kernel->mount_table = "/dev/vda / ext4 rw 0 0\n";
    auto client = h.connect();
    for (const Json& bad : {Json(-1), Json(50), Json(600'001), Json("60000"), Json(1.5)}) {
        auto reply = client.call("freeze", Json{{"timeout_ms", bad}});
        REQUIRE_FALSE(reply.has_value());
        CHECK(error_code(reply.error()) == "bad_request");
    }
    CHECK(h.freeze_kernel->frozen.empty());
    auto frozen = freeze_filesystems(client, std::chrono::milliseconds(150));
    REQUIRE(frozen.has_value());
    CHECK(h.freeze_kernel->frozen.count("/") == 1);
    for (int i = 0; i < 100 && h.agent->freeze().watchdog_thaws() == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(h.agent->freeze().watchdog_thaws() == 1);
    CHECK(h.freeze_kernel->frozen.empty());
    // A thaw in time disarms it.
    REQUIRE(freeze_filesystems(client, std::chrono::milliseconds(150)).has_value());
    REQUIRE(thaw_filesystems(client).has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(h.agent->freeze().watchdog_thaws() == 1);
}

TEST_CASE("an agent given no freeze kernel refuses: outside a guest nothing is frozen") {
    TempDir dir;
    AgentOptions options;
    options.token = std::string(kTestToken);
    options.env_file = (dir.path / "env").string();
    Agent agent(std::move(options));
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    std::thread serving([&agent, fd = UniqueFd(fds[1])]() mutable { agent.serve(std::move(fd)); });
    {
        auto client = AgentClient::handshake(UniqueFd(fds[0]), kTestToken);
        REQUIRE(client.has_value());
        auto frozen = freeze_filesystems(*client);
        REQUIRE_FALSE(frozen.has_value());
        CHECK(error_code(frozen.error()) == "permission_denied");
        CHECK_FALSE(thaw_filesystems(*client).has_value());
    }
    serving.join();
}

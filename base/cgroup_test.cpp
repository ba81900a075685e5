// Needs a writable cgroup2 directory: SBX_TEST_CGROUP, or the unified
// hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified; without one
// every case is skipped (the guest test sbxd-lifecycle covers the limits
// in level 1, where every controller is enabled).
#include "base/cgroup.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "base/child_spawn.hpp"

using namespace sbx;

namespace {

std::string writable_cgroup2() {
    std::vector<std::string> candidates;
    if (const char* dir = std::getenv("SBX_TEST_CGROUP")) {
        candidates.emplace_back(dir);
    }
    candidates.insert(candidates.end(), {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"});
    for (const auto& dir : candidates) {
        if (is_cgroup2(dir) && ::access(dir.c_str(), W_OK) == 0) {
            return dir;
        }
    }
    return {};
}

std::string read_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("a child starts inside its cgroup and remove() ends it") {
    const std::string root = writable_cgroup2();
    if (root.empty()) {
        MESSAGE("SKIP: no writable cgroup2 here");
        return;
    }
    const std::string path = root + "/sbx-test-" + std::to_string(::getpid());
    auto cg = Cgroup::create(path, {});
    REQUIRE(cg);
    const std::string log = "/tmp/sbx-cgroup-test-" + std::to_string(::getpid()) + ".log";
    auto pid = spawn_session_leader_in_cgroup("/bin/sleep", {"60"}, log, cg->fd());
    REQUIRE(pid);
    cg->release();
    // Its first instruction ran there: /proc/PID/cgroup names the new cgroup.
    const std::string relative = path.substr(root.size());
    std::string line;
    std::ifstream in("/proc/" + std::to_string(*pid) + "/cgroup");
    for (std::string l; std::getline(in, l);) {
        if (l.rfind("0::", 0) == 0) {
            line = l;
        }
    }
    CHECK(line == "0::" + relative);
    CHECK(::getsid(*pid) == *pid);  // a session of its own
    CHECK(read_line(path + "/cgroup.procs") == std::to_string(*pid));
    // remove() kills what still runs, then the directory goes.
    REQUIRE(Cgroup::remove(path));
    int status = 0;
    REQUIRE(::waitpid(*pid, &status, 0) == *pid);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    CHECK_FALSE(exists(path));
    CHECK(Cgroup::remove(path));  // a missing one is fine
    ::unlink(log.c_str());
}

TEST_CASE("a cgroup not released is removed with its object; a failed exec is an error") {
    const std::string root = writable_cgroup2();
    if (root.empty()) {
        MESSAGE("SKIP: no writable cgroup2 here");
        return;
    }
    const std::string path = root + "/sbx-test-b-" + std::to_string(::getpid());
    {
        auto cg = Cgroup::create(path, {});
        REQUIRE(cg);
        CHECK(exists(path));
        auto bad = spawn_session_leader_in_cgroup("/nonexistent/program", {}, "/dev/null", cg->fd());
        REQUIRE_FALSE(bad);
        CHECK(bad.error().to_string().find("No such file") != std::string::npos);
    }
    CHECK_FALSE(exists(path));
    // A leftover directory of that name is replaced.
    REQUIRE(::mkdir(path.c_str(), 0755) == 0);
    auto again = Cgroup::create(path, {});
    REQUIRE(again);
    CHECK(exists(path));
}

TEST_CASE("a limit whose controller is not enabled is refused, and nothing is left") {
    const std::string root = writable_cgroup2();
    if (root.empty()) {
        MESSAGE("SKIP: no writable cgroup2 here");
        return;
    }
    const std::string path = root + "/sbx-test-c-" + std::to_string(::getpid());
    if (exists(root + "/cgroup.subtree_control") &&
        read_line(root + "/cgroup.subtree_control").find("pids") != std::string::npos) {
        auto cg = Cgroup::create(path, {.pids_max = 7});
        REQUIRE(cg);
        CHECK(read_line(path + "/pids.max") == "7");
        return;
    }
    CHECK_FALSE(Cgroup::create(path, {.pids_max = 7}));
    CHECK_FALSE(exists(path));
}

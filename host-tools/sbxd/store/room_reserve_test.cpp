// The room reserve (room_reserve.hpp) on its own, and the store on a file
// system that fills up: a tmpfs of its own size, mounted in a child's own
// mount namespace (root only; skipped otherwise).
#include "host-tools/sbxd/store/room_reserve.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "host-tools/sbxd/store/store.hpp"
#include "host-tools/sbxd/testing/temp_dir.hpp"

using namespace sbx;
using namespace sbx::sbxd;

TEST_CASE("a room reserve holds its bytes, gives them back and is made again") {
    testing::TempDir dir{"sbxd-room"};
    RoomReserve room(dir.file("r"), 1 << 20);
    CHECK_FALSE(room.held());
    CHECK_FALSE(room.release());
    REQUIRE(room.fill().has_value());
    CHECK(room.held());
    struct stat st {};
    REQUIRE(::stat(dir.file("r").c_str(), &st) == 0);
    CHECK(st.st_blocks * 512 >= (1 << 20));  // allocated, not a sparse size
    CHECK(room.release());
    CHECK_FALSE(room.held());
    REQUIRE(room.fill().has_value());
    CHECK(room.held());
}

namespace {

// Writes zeroes to PATH until the file system has no room left.
bool fill_up(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return false;
    }
    static const char block[4096] = {};
    while (::write(fd, block, sizeof block) > 0) {
    }
    const bool full = errno == ENOSPC;
    ::close(fd);
    return full;
}

// The child's scenario; its exit status is the step that failed (0: none).
int full_file_system_steps(const std::string& dir) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        return 77;
    }
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=12m") != 0) {
        return 77;
    }
    auto store = Store::open(dir + "/sbxd.db");
    if (!store || !(*store)->room_reserved()) {
        return 1;
    }
    SandboxRecord s;
    s.id = s.name = "sbx_full";
    s.from = "default";
    s.size = "small";
    if (!(*store)->create_sandbox(s, std::nullopt) ||
        !(*store)->change_state(s.id, {SandboxState::Running, 2, VmmProcess{42, 7, "/x"}})) {
        return 2;
    }
    if (!fill_up(dir + "/filler")) {
        return 3;
    }
    // A stop that did not fit: back to running, through the reserve.
    if (!(*store)->change_state(s.id, {SandboxState::Stopping, 3, std::nullopt}) ||
        !(*store)->change_state(s.id, {SandboxState::Running, 4, VmmProcess{42, 7, "/x"}})) {
        return 4;
    }
    if ((*store)->room_reserved()) {
        return 5;  // the reserve was not what made room
    }
    // Filled again, with no reserve left: the write fails, and says why.
    if (!fill_up(dir + "/filler2")) {
        return 3;
    }
    for (int i = 0; i < 20; ++i) {
        auto r = (*store)->change_state(s.id, {i % 2 ? SandboxState::Running : SandboxState::Stopping, 5 + i,
                                               VmmProcess{42, 7, "/x"}});
        if (!r) {
            if (r.error().code != sqlite::kStoreFull) {
                std::fprintf(stderr, "%s\n", r.error().to_string().c_str());
                return 6;
            }
            break;
        }
        if (i == 19) {
            return 7;  // 20 commits fitted into a full file system
        }
    }
    // Room again: the next write goes through and the reserve is back.
    ::unlink((dir + "/filler").c_str());
    ::unlink((dir + "/filler2").c_str());
    auto now = (*store)->get_sandbox(s.id);
    if (!now) {
        return 8;
    }
    const SandboxState next = now->state == SandboxState::Running ? SandboxState::Stopping : SandboxState::Running;
    if (!(*store)->change_state(s.id, {next, 1000, VmmProcess{42, 7, "/x"}}) || !(*store)->room_reserved()) {
        return 9;
    }
    return 0;
}

}  // namespace

TEST_CASE("on a full file system a state change uses the reserve, then fails with store_full") {
    testing::TempDir dir{"sbxd-room-full"};
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::_exit(full_file_system_steps(dir.path()));
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        MESSAGE("not checked: no tmpfs of our own here (needs root)");
        return;
    }
    CHECK(WEXITSTATUS(status) == 0);
}

#include "base/child_spawn.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <cstdint>
#include <string>

#include "base/unique_fd.hpp"

using namespace sbx;

namespace {

struct TempLog {
    std::string dir;
    TempLog() {
        std::string templ = (std::filesystem::temp_directory_path() / "sbx-child-spawn-XXXXXX").string();
        REQUIRE(::mkdtemp(templ.data()) != nullptr);
        dir = templ;
    }
    ~TempLog() {
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }
    [[nodiscard]] std::string path() const { return dir + "/child.log"; }
};

int wait_exit(pid_t pid) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("a session leader logs stdout and stderr and inherits no fd or signal state") {
    TempLog log;
    // An fd without O_CLOEXEC and a blocked, ignored SIGPIPE in the parent.
    UniqueFd leaky(::open("/dev/null", O_RDONLY));
    REQUIRE(leaky);
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigset_t old_mask;
    REQUIRE(::sigprocmask(SIG_BLOCK, &pipe_only, &old_mask) == 0);
    struct sigaction ignore{};
    ignore.sa_handler = SIG_IGN;
    struct sigaction old_action{};
    REQUIRE(::sigaction(SIGPIPE, &ignore, &old_action) == 0);

    const std::string script =
        "echo out; echo err >&2; "
        "test -e /proc/$$/fd/" + std::to_string(leaky.get()) + " && echo leaked; "
        "read line && echo stdin-had-data; "
        "grep -E '^Sig(Blk|Ign):' /proc/self/status";  // grep's own: what the shell was given
    auto pid = spawn_session_leader("/bin/sh", {"-c", script}, log.path());
    ::sigaction(SIGPIPE, &old_action, nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    REQUIRE_MESSAGE(pid.has_value(), (pid ? "" : pid.error().to_string()));
    CHECK(::getsid(*pid) == *pid);  // a zombie until reaped: its session is still known
    CHECK(wait_exit(*pid) == 0);

    auto text = read_file(log.path(), 1 << 16);
    REQUIRE(text.has_value());
    INFO(*text);
    CHECK(text->find("out\n") != std::string::npos);
    CHECK(text->find("err\n") != std::string::npos);
    CHECK(text->find("leaked") == std::string::npos);
    CHECK(text->find("stdin-had-data") == std::string::npos);
    CHECK(text->find("SigBlk:\t0000000000000000") != std::string::npos);
    // Signals 1-31 at their defaults; glibc's posix_spawn ignores its own
    // internal ones (32, 33) in the child.
    const auto ignored_at = text->find("SigIgn:\t");
    REQUIRE(ignored_at != std::string::npos);
    const std::uint64_t ignored = std::stoull(text->substr(ignored_at + 8, 16), nullptr, 16);
    CHECK((ignored & 0x7fffffffULL) == 0);
    CHECK((std::filesystem::status(log.path()).permissions() & std::filesystem::perms::all) ==
          (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
}

TEST_CASE("the log is appended to, not truncated") {
    TempLog log;
    for (const char* word : {"first", "second"}) {
        auto pid = spawn_session_leader("/bin/echo", {word}, log.path());
        REQUIRE(pid.has_value());
        CHECK(wait_exit(*pid) == 0);
    }
    auto text = read_file(log.path(), 1 << 16);
    REQUIRE(text.has_value());
    CHECK(*text == "first\nsecond\n");
}

TEST_CASE("a program that does not exist is an error with its errno") {
    TempLog log;
    auto pid = spawn_session_leader(log.dir + "/no-such-program", {}, log.path());
    REQUIRE_FALSE(pid.has_value());
    CHECK(pid.error().errno_value == ENOENT);
    CHECK(pid.error().message.find("no-such-program") != std::string::npos);
}

TEST_CASE("a log that cannot be opened is an error") {
    TempLog log;
    auto pid = spawn_session_leader("/bin/true", {}, log.dir + "/missing-dir/child.log");
    REQUIRE_FALSE(pid.has_value());
    CHECK(pid.error().errno_value == ENOENT);
}

#include "host-tools/sbxd/sandbox/process_identity.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace sbx::sbxd;

TEST_CASE("a live child is recognised by pid and start time, and not once it is gone") {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    // A failed check must not leave the child behind (it would hold the
    // test's output open).
    struct Reaper {
        pid_t pid;
        ~Reaper() {
            if (pid > 0 && ::kill(pid, SIGKILL) == 0) {
                ::waitpid(pid, nullptr, 0);
            }
        }
    } reaper{child};
    auto start = process_start_time(child);
    REQUIRE(start.has_value());
    CHECK(*start > 0);
    CHECK(*start >= process_start_time(::getpid()).value());
    CHECK(is_same_process_alive(VmmProcess{child, *start, "/x"}));
    CHECK_FALSE(is_same_process_alive(VmmProcess{child, *start + 1, "/x"}));  // a recycled pid

    REQUIRE(::kill(child, SIGKILL) == 0);
    // Killed but not reaped: a zombie is not alive.
    for (int i = 0; i < 200 && is_same_process_alive(VmmProcess{child, *start, "/x"}); ++i) {
        ::usleep(5000);
    }
    CHECK_FALSE(is_same_process_alive(VmmProcess{child, *start, "/x"}));
    REQUIRE(::waitpid(child, nullptr, 0) == child);
    reaper.pid = 0;
    auto gone = process_start_time(child);
    REQUIRE_FALSE(gone.has_value());
    CHECK(gone.error().code == "not_found");
    CHECK_FALSE(is_same_process_alive(VmmProcess{0, 0, "/x"}));
}

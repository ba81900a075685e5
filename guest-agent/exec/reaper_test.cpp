// The reaper: every child's status reaches its Child, including that of a
// child that ends before it has been registered.
#include <doctest/doctest.h>
#include <unistd.h>

#include <csignal>

#include "guest-agent/exec/reaper.hpp"

using namespace sbx::agent;
using namespace std::chrono_literals;

namespace {

int exit_seven(void*) {
    ::_exit(7);
}

}  // namespace

TEST_CASE("statuses arrive, also for children that end before they are registered") {
    Reaper& reaper = Reaper::instance();
    for (auto delay : {0us, 20000us}) {
        reaper.set_registration_delay_for_tests(delay);
        for (int i = 0; i < 20; ++i) {
            auto child = reaper.start_child(exit_seven, nullptr);
            REQUIRE(child);
            (*child)->wait();
            auto status = (*child)->exit_status();
            REQUIRE(status);
            CHECK(status->code == 7);
            CHECK_FALSE((*child)->signal_group(SIGKILL));  // reaped: its pid may be someone else's now
        }
    }
    reaper.set_registration_delay_for_tests(0us);
}

#include "host-tools/sbxd/sandbox/state.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>

using namespace sbx::sbxd;
using S = SandboxState;

TEST_CASE("every state's name parses back to it and unknown names do not") {
    for (S state : kAllSandboxStates) {
        CHECK(parse_sandbox_state(to_string(state)) == state);
    }
    CHECK_FALSE(parse_sandbox_state("Running"));
    CHECK_FALSE(parse_sandbox_state(""));
    CHECK_FALSE(parse_sandbox_state("idle"));
}

TEST_CASE("exactly the listed pairs are allowed, over every pair of states") {
    // The lifecycle spelled out pair by pair (product.md §2, docs/sbxd.md):
    // a second, independent statement of the table.
    const std::set<std::pair<std::string, std::string>> expected = {
        {"creating", "running"}, {"creating", "crashed"}, {"creating", "deleting"}, {"creating", "stopped"},
        {"running", "stopping"},
        {"running", "crashed"},  {"running", "deleting"}, {"stopping", "stopped"},  {"stopping", "paused"},
        {"stopping", "crashed"}, {"stopping", "running"}, {"stopped", "creating"}, {"stopped", "deleting"},  {"paused", "creating"},
        {"paused", "stopped"},   {"paused", "deleting"},  {"crashed", "creating"},  {"crashed", "deleting"},
    };
    int allowed = 0;
    for (S from : kAllSandboxStates) {
        for (S to : kAllSandboxStates) {
            bool want = expected.count({std::string(to_string(from)), std::string(to_string(to))}) == 1;
            CAPTURE(to_string(from));
            CAPTURE(to_string(to));
            CHECK(can_transition(from, to) == want);
            allowed += want ? 1 : 0;
        }
    }
    CHECK(allowed == static_cast<int>(allowed_transitions().size()));
}

TEST_CASE("no state changes to itself and deleting is final") {
    for (S state : kAllSandboxStates) {
        CHECK_FALSE(can_transition(state, state));
        CHECK_FALSE(can_transition(S::Deleting, state));
    }
}

TEST_CASE("the states with a VMM to account for") {
    CHECK(has_vmm(S::Creating));
    CHECK(has_vmm(S::Running));
    CHECK(has_vmm(S::Stopping));
    CHECK_FALSE(has_vmm(S::Stopped));
    CHECK_FALSE(has_vmm(S::Paused));
    CHECK_FALSE(has_vmm(S::Crashed));
}

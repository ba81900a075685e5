#include "base/log_budget.hpp"

#include <doctest/doctest.h>

using namespace sbx;
using namespace std::chrono_literals;

TEST_CASE("a log budget passes a burst, then one line per interval with the count held back") {
    LogBudget budget(3, 10s);
    const auto t0 = LogBudget::Clock::time_point{} + 1h;
    std::uint64_t held = 99;
    for (int i = 0; i < 3; ++i) {
        CHECK(budget.take(held, t0));
        CHECK(held == 0);
    }
    for (int i = 0; i < 1000; ++i) {
        CHECK_FALSE(budget.take(held, t0 + 9s));
    }
    CHECK(budget.take(held, t0 + 10s));
    CHECK(held == 1000);
    CHECK_FALSE(budget.take(held, t0 + 19s));
    CHECK(budget.take(held, t0 + 20s));
    CHECK(held == 1);
    CHECK(budget.take(held, t0 + 40s));
    CHECK(held == 0);
}

#include <doctest/doctest.h>

#include "devices/legacy/boot_timer.hpp"

using namespace sbx;

TEST_CASE("boot timer records only the first magic write at offset 0") {
    auto start = BootTimer::Clock::now() - std::chrono::milliseconds(50);
    BootTimer timer(start);
    CHECK_FALSE(timer.boot_time());
    std::uint8_t wrong = 7;
    timer.write(0, std::span<const std::uint8_t>(&wrong, 1));
    std::uint8_t magic = BootTimer::kMagic;
    timer.write(1, std::span<const std::uint8_t>(&magic, 1));
    CHECK_FALSE(timer.boot_time());
    timer.write(0, std::span<const std::uint8_t>(&magic, 1));
    REQUIRE(timer.boot_time());
    auto first = *timer.boot_time();
    CHECK(first >= std::chrono::milliseconds(50));
    timer.write(0, std::span<const std::uint8_t>(&magic, 1));
    CHECK(*timer.boot_time() == first);
}

#include <doctest/doctest.h>

#include <vector>

#include "devices/device_test_util.hpp"
#include "devices/pci/pvpanic.hpp"

using namespace sbx;
using namespace sbx::testing;

TEST_CASE("pvpanic offers PANICKED and SHUTDOWN, not CRASH_LOADED") {
    PvPanic dev([](PvPanic::Event) {});
    CHECK(rd(dev, 0) == (PvPanic::kPanicked | PvPanic::kShutdown));
    CHECK(rd(dev, 1) == 0);
}

TEST_CASE("pvpanic reports what the guest writes") {
    std::vector<PvPanic::Event> events;
    PvPanic dev([&](PvPanic::Event e) { events.push_back(e); });
    wr(dev, 0, PvPanic::kPanicked);
    wr(dev, 0, PvPanic::kShutdown);
    wr(dev, 0, PvPanic::kCrashLoaded);  // not offered: ignored
    wr(dev, 0, 0);
    wr(dev, 1, PvPanic::kPanicked);  // not the register
    wr(dev, 0, PvPanic::kPanicked | PvPanic::kShutdown);
    CHECK(events == std::vector{PvPanic::Event::Panicked, PvPanic::Event::Shutdown, PvPanic::Event::Panicked});
}

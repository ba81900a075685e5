#include <doctest/doctest.h>

#include <vector>

#include "devices/bus.hpp"

using namespace sbx;

namespace {
struct Recorder : BusDevice {
    std::vector<std::uint64_t> reads, writes;
    void read(std::uint64_t offset, std::span<std::uint8_t> data) override {
        reads.push_back(offset);
        for (auto& b : data) {
            b = 0x42;
        }
    }
    void write(std::uint64_t offset, std::span<const std::uint8_t>) override { writes.push_back(offset); }
};
}  // namespace

TEST_CASE("bus rejects overlapping ranges") {
    Bus bus("test");
    auto dev = std::make_shared<Recorder>();
    REQUIRE(bus.insert(dev, 0x100, 0x10));
    CHECK_FALSE(bus.insert(dev, 0x100, 1));
    CHECK_FALSE(bus.insert(dev, 0x10f, 1));
    CHECK_FALSE(bus.insert(dev, 0xf0, 0x11));
    CHECK_FALSE(bus.insert(dev, 0x0, 0x1000));
    CHECK(bus.insert(dev, 0xf0, 0x10));
    CHECK(bus.insert(dev, 0x110, 0x10));
    CHECK_FALSE(bus.insert(dev, 0x200, 0));
    CHECK_FALSE(bus.insert(dev, UINT64_MAX, 2));
    CHECK(bus.insert(dev, UINT64_MAX, 1));
}

TEST_CASE("bus dispatches by offset and refuses accesses that straddle a range") {
    Bus bus("test");
    auto dev = std::make_shared<Recorder>();
    REQUIRE(bus.insert(dev, 0x3f8, 8));
    std::uint8_t byte = 0;
    CHECK(bus.read(0x3fd, std::span(&byte, 1)));
    CHECK(byte == 0x42);
    CHECK(dev->reads.back() == 5);
    std::uint8_t word[4] = {};
    CHECK_FALSE(bus.read(0x3fe, std::span(word, 4)));  // runs past 0x3ff
    CHECK(word[0] == 0xff);
    CHECK_FALSE(bus.read(0x3f7, std::span(&byte, 1)));
    CHECK(bus.write(0x3f8, std::span<const std::uint8_t>(&byte, 1)));
    CHECK(dev->writes.back() == 0);
}

TEST_CASE("a frozen bus accepts no new devices") {
    Bus bus("test");
    bus.freeze();
    CHECK_FALSE(bus.insert(std::make_shared<Recorder>(), 0, 1));
}

#include <doctest/doctest.h>

#include "vmm/boot/layout.hpp"

using namespace sbx;
using namespace sbx::boot;

TEST_CASE("ram_regions keeps RAM below 3 GiB in one region") {
    auto regions = ram_regions(128 * kMiB);
    REQUIRE(regions.size() == 1);
    CHECK(regions[0].start.value == 0);
    CHECK(regions[0].size == 128 * kMiB);

    regions = ram_regions(3 * kGiB);
    REQUIRE(regions.size() == 1);
    CHECK(regions[0].size == 3 * kGiB);
}

TEST_CASE("ram_regions continues RAM above 3 GiB at 4 GiB") {
    auto regions = ram_regions(4 * kGiB);
    REQUIRE(regions.size() == 2);
    CHECK(regions[0].start.value == 0);
    CHECK(regions[0].size == kMmioGapStart);
    CHECK(regions[1].start.value == kMmioGapEnd);
    CHECK(regions[1].size == 1 * kGiB);

    regions = ram_regions(16 * kGiB);
    REQUIRE(regions.size() == 2);
    CHECK(regions[1].start.value + regions[1].size == 17 * kGiB);
}

TEST_CASE("ram_regions drops a partial page") {
    auto regions = ram_regions(64 * kMiB + 100);
    REQUIRE(regions.size() == 1);
    CHECK(regions[0].size == 64 * kMiB);
    CHECK(ram_regions(100).empty());
}

TEST_CASE("check_memory_size enforces the minimum, page granularity and address width") {
    CHECK(check_memory_size(kMinGuestMemory));
    CHECK(check_memory_size(16 * kGiB));
    auto small = check_memory_size(kMinGuestMemory - kPageSize);
    REQUIRE_FALSE(small);
    CHECK(small.error().message.find("minimum") != std::string::npos);
    CHECK_FALSE(check_memory_size(0));
    CHECK_FALSE(check_memory_size(kMinGuestMemory + 1));
    CHECK_FALSE(check_memory_size(UINT64_MAX - kPageSize + 1));
}

TEST_CASE("virtio-mmio slots lie in the MMIO gap below the IOAPIC") {
    CHECK(virtio_mmio_addr(0).value == 0xd0001000);
    CHECK(virtio_mmio_addr(1).value == 0xd0002000);
    CHECK(virtio_mmio_irq(0) == 5);
    CHECK(virtio_mmio_irq(kVirtioMmioMaxDevices - 1) == kIoapicPins - 1);
    CHECK(virtio_mmio_addr(kVirtioMmioMaxDevices).value <= kIoapicAddr);
}

// Shared by the virtio device unit tests: a TestBed (guest memory, event
// loop, interrupt counter and an MmioTransport around the device) that
// plays the driver's side of the virtio-mmio registers, and the
// conformance checks every device must pass (§4.2.2, §3.1.1, §2.1.2).
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <vector>

#include "base/event_loop.hpp"
#include "devices/device_test_util.hpp"
#include "devices/virtio/mmio/mmio_transport.hpp"
#include "devices/virtio/queue/mock_driver.hpp"

namespace sbx::virtio::testing {

inline GuestMemory make_test_memory(std::uint64_t size = 64ULL << 20) {
    MemoryRegionSpec spec{GuestAddress(0), size};
    auto memory = GuestMemory::create(std::span(&spec, 1));
    REQUIRE(memory.has_value());
    return std::move(*memory);
}

struct TestBed {
    GuestMemory memory = make_test_memory();
    std::unique_ptr<EventLoop> loop = [] {
        auto l = EventLoop::create();
        REQUIRE(l.has_value());
        return std::move(*l);
    }();
    sbx::testing::CountingIrq irq;
    std::unique_ptr<MmioTransport> transport;
    std::vector<std::unique_ptr<MockDriver>> drivers;

    explicit TestBed(std::unique_ptr<VirtioDevice> device)
        : transport(std::make_unique<MmioTransport>(std::move(device), memory, irq, *loop)) {}

    std::uint32_t reg(std::uint64_t offset) const {
        std::uint32_t v = 0;
        transport->read(offset, std::span(reinterpret_cast<std::uint8_t*>(&v), 4));
        return v;
    }
    void set_reg(std::uint64_t offset, std::uint32_t value) const {
        transport->write(offset, std::span(reinterpret_cast<const std::uint8_t*>(&value), 4));
    }
    std::uint64_t device_features() const {
        set_reg(mmio_reg::kDeviceFeaturesSel, 0);
        std::uint64_t lo = reg(mmio_reg::kDeviceFeatures);
        set_reg(mmio_reg::kDeviceFeaturesSel, 1);
        return lo | (std::uint64_t{reg(mmio_reg::kDeviceFeatures)} << 32);
    }
    // §3.1.1 steps 1-6; returns the status read back after FEATURES_OK.
    std::uint32_t negotiate(std::uint64_t features) const {
        set_reg(mmio_reg::kStatus, 0);
        set_reg(mmio_reg::kStatus, kStatusAcknowledge);
        set_reg(mmio_reg::kStatus, kStatusAcknowledge | kStatusDriver);
        set_reg(mmio_reg::kDriverFeaturesSel, 0);
        set_reg(mmio_reg::kDriverFeatures, static_cast<std::uint32_t>(features));
        set_reg(mmio_reg::kDriverFeaturesSel, 1);
        set_reg(mmio_reg::kDriverFeatures, static_cast<std::uint32_t>(features >> 32));
        set_reg(mmio_reg::kStatus, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk);
        return reg(mmio_reg::kStatus);
    }
    // Lays out queue `index` with a mock driver (rings at (index+1) * 4 MiB)
    // of `size` entries (the queue's maximum when 0) and sets it ready.
    MockDriver& setup_queue(std::uint32_t index, std::uint16_t size = 0) {
        set_reg(mmio_reg::kQueueSel, index);
        if (size == 0) {
            size = static_cast<std::uint16_t>(reg(mmio_reg::kQueueNumMax));
        }
        auto driver = std::make_unique<MockDriver>(memory, GuestAddress((index + 1ULL) * (4ULL << 20)), size);
        set_reg(mmio_reg::kQueueNum, size);
        set_reg(mmio_reg::kQueueDescLow, static_cast<std::uint32_t>(driver->desc_table().value));
        Queue probe(size);
        driver->configure(probe);
        set_reg(mmio_reg::kQueueDriverLow, static_cast<std::uint32_t>(probe.avail_ring()));
        set_reg(mmio_reg::kQueueDeviceLow, static_cast<std::uint32_t>(probe.used_ring()));
        set_reg(mmio_reg::kQueueReady, 1);
        if (drivers.size() <= index) {
            drivers.resize(index + 1);
        }
        drivers[index] = std::move(driver);
        return *drivers[index];
    }
    void driver_ok() const {
        set_reg(mmio_reg::kStatus, reg(mmio_reg::kStatus) | kStatusDriverOk);
    }
    // Negotiates `features` (device's offer when 0), sets up every queue and
    // sets DRIVER_OK.
    void start(std::uint64_t features = 0) {
        std::uint32_t status = negotiate(features != 0 ? features : device_features());
        REQUIRE((status & kStatusFeaturesOk) != 0);
        for (std::size_t i = 0; i < transport->queue_count(); ++i) {
            setup_queue(static_cast<std::uint32_t>(i));
        }
        driver_ok();
        REQUIRE_FALSE(needs_reset());
    }
    void notify(std::size_t index) const { transport->notify(index); }
    // Runs the event loop's ready handlers, waiting up to timeout_ms for the
    // first; returns how many ran.
    std::size_t pump(int timeout_ms = 0) const {
        auto n = loop->run_once(timeout_ms);
        REQUIRE(n.has_value());
        return *n;
    }
    bool needs_reset() const { return (reg(mmio_reg::kStatus) & kStatusNeedsReset) != 0; }
    std::uint32_t config32(std::uint64_t offset) const { return reg(mmio_reg::kConfig + offset); }
};

// The checks every virtio device passes. `parsing_queue` is a queue whose
// chains the device parses as soon as it is notified (for the hostile-chain
// check).
inline void check_conformance(const std::function<std::unique_ptr<VirtioDevice>()>& make, DeviceType type,
                              std::uint32_t parsing_queue) {
    SUBCASE("identity registers (§4.2.2)") {
        TestBed bed(make());
        CHECK(bed.reg(mmio_reg::kMagic) == kMmioMagic);
        CHECK(bed.reg(mmio_reg::kVersion) == 2);
        CHECK(bed.reg(mmio_reg::kDeviceId) == static_cast<std::uint32_t>(type));
        CHECK(bed.reg(mmio_reg::kStatus) == 0);
    }
    SUBCASE("offers VERSION_1, EVENT_IDX and INDIRECT_DESC") {
        TestBed bed(make());
        std::uint64_t f = bed.device_features();
        CHECK((f & kFeatureVersion1) != 0);
        CHECK((f & kFeatureEventIdx) != 0);
        CHECK((f & kFeatureIndirectDesc) != 0);
    }
    SUBCASE("queues: nonzero power-of-two maximum sizes, none past the last") {
        TestBed bed(make());
        for (std::uint32_t i = 0; i < bed.transport->queue_count(); ++i) {
            bed.set_reg(mmio_reg::kQueueSel, i);
            std::uint32_t max = bed.reg(mmio_reg::kQueueNumMax);
            CHECK(max > 0);
            CHECK((max & (max - 1)) == 0);
            CHECK(bed.reg(mmio_reg::kQueueReady) == 0);
        }
        bed.set_reg(mmio_reg::kQueueSel, static_cast<std::uint32_t>(bed.transport->queue_count()));
        CHECK(bed.reg(mmio_reg::kQueueNumMax) == 0);
    }
    SUBCASE("FEATURES_OK is refused without VERSION_1 and with unknown features (§2.2.2)") {
        TestBed bed(make());
        std::uint64_t f = bed.device_features();
        CHECK((bed.negotiate(f & ~kFeatureVersion1) & kStatusFeaturesOk) == 0);
        CHECK((bed.negotiate(f | (1ULL << 50)) & kStatusFeaturesOk) == 0);
        CHECK((bed.negotiate(f) & kStatusFeaturesOk) != 0);
    }
    SUBCASE("configuration space reads past its end are zero") {
        TestBed bed(make());
        CHECK(bed.reg(mmio_reg::kConfig + 0xe00) == 0);
    }
    SUBCASE("activates, resets to status 0, and activates again (§2.4)") {
        TestBed bed(make());
        bed.start();
        CHECK((bed.reg(mmio_reg::kStatus) & kStatusDriverOk) != 0);
        bed.set_reg(mmio_reg::kStatus, 0);
        CHECK(bed.reg(mmio_reg::kStatus) == 0);
        CHECK(bed.reg(mmio_reg::kInterruptStatus) == 0);
        bed.set_reg(mmio_reg::kQueueSel, 0);
        CHECK(bed.reg(mmio_reg::kQueueReady) == 0);
        bed.start();
        CHECK((bed.reg(mmio_reg::kStatus) & kStatusDriverOk) != 0);
    }
    SUBCASE("a queue size that is not a power of two means NEEDS_RESET") {
        TestBed bed(make());
        REQUIRE((bed.negotiate(bed.device_features()) & kStatusFeaturesOk) != 0);
        for (std::uint32_t i = 0; i < bed.transport->queue_count(); ++i) {
            bed.setup_queue(i, i == 0 ? 3 : 0);
        }
        bed.driver_ok();
        CHECK(bed.needs_reset());
        CHECK((bed.reg(mmio_reg::kInterruptStatus) & kInterruptConfigChange) != 0);
        CHECK(bed.irq.count > 0);
    }
    SUBCASE("a descriptor loop means NEEDS_RESET; a reset recovers the device") {
        TestBed bed(make());
        bed.start();
        MockDriver& d = *bed.drivers[parsing_queue];
        d.write_descriptor(0, {0x100000, 16, kDescFlagNext, 1});
        d.write_descriptor(1, {0x100000, 16, kDescFlagNext, 0});
        d.publish(0);
        bed.notify(parsing_queue);
        bed.pump();
        CHECK(bed.needs_reset());
        bed.set_reg(mmio_reg::kStatus, 0);
        bed.start();
        CHECK_FALSE(bed.needs_reset());
    }
}

}  // namespace sbx::virtio::testing

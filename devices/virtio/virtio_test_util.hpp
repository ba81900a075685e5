// Shared by the virtio device unit tests: a TestBed (guest memory, event
// loop, interrupt counter and an MmioTransport around the device) that
// plays the driver's side of the virtio-mmio registers, the conformance
// checks every device must pass (§4.2.2, §3.1.1, §2.1.2), and the snapshot
// checks (round trip with traffic, refusals).
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
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

    // The restored VM's transport: a fresh one around `device` on the same
    // guest memory (the mock drivers, the guest's side, stay as they are).
    void replace(std::unique_ptr<VirtioDevice> device) {
        transport.reset();
        transport = std::make_unique<MmioTransport>(std::move(device), memory, irq, *loop);
    }

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
    SUBCASE("an idle running device restores from its snapshot into a fresh one, state unchanged") {
        TestBed bed(make());
        bed.start();
        REQUIRE(bed.transport->quiesce());
        const auto bytes = bed.transport->save_state();
        bed.replace(make());
        auto r = bed.transport->restore_state(bytes);
        REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().to_string()));
        CHECK(bed.transport->save_state() == bytes);
        CHECK_FALSE(bed.needs_reset());
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

// ---- Snapshots ----

// What the driver reads back from the transport's registers: status,
// interrupt status, configuration generation, features offered, and per
// queue its maximum and ready bit. Reading selects queues and feature
// words, so it comes after save_state().
struct DriverView {
    std::uint32_t status = 0;
    std::uint32_t config_generation = 0;
    std::uint64_t device_features = 0;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> queues;  // QueueNumMax, QueueReady
    bool operator==(const DriverView&) const = default;
};

inline DriverView driver_view(const TestBed& bed) {
    DriverView v{bed.reg(mmio_reg::kStatus), bed.reg(mmio_reg::kConfigGeneration), bed.device_features(), {}};
    for (std::uint32_t i = 0; i < bed.transport->queue_count(); ++i) {
        bed.set_reg(mmio_reg::kQueueSel, i);
        v.queues.emplace_back(bed.reg(mmio_reg::kQueueNumMax), bed.reg(mmio_reg::kQueueReady));
    }
    return v;
}

// The queue configuration a restore must bring back exactly (positions
// move on as soon as the restored device processes its queues).
inline void check_same_configuration(const MmioTransportState& saved, const MmioTransportState& restored) {
    CHECK(restored.status == saved.status);
    CHECK(restored.driver_features == saved.driver_features);
    CHECK(restored.device_features_sel == saved.device_features_sel);
    CHECK(restored.driver_features_sel == saved.driver_features_sel);
    CHECK(restored.queue_sel == saved.queue_sel);
    CHECK(restored.config_generation == saved.config_generation);
    CHECK((restored.interrupt_status & saved.interrupt_status) == saved.interrupt_status);
    REQUIRE(restored.queues.size() == saved.queues.size());
    for (std::size_t i = 0; i < saved.queues.size(); ++i) {
        CAPTURE(i);
        const QueueState& a = saved.queues[i];
        const QueueState& b = restored.queues[i];
        CHECK(b.max_size == a.max_size);
        CHECK(b.size == a.size);
        CHECK(b.ready == a.ready);
        CHECK(b.desc_table == a.desc_table);
        CHECK(b.avail_ring == a.avail_ring);
        CHECK(b.used_ring == a.used_ring);
        CHECK(b.event_idx == a.event_idx);
        CHECK(b.indirect_allowed == a.indirect_allowed);
        CHECK(b.active == a.active);
    }
}

// The snapshot round trip every device passes: start the device unless
// the bed already did (`features`, the device's offer when 0), run
// `before` (traffic), quiesce
// and save; build the restored VM's transport around `make_restored()` on
// the same guest memory and restore; the driver reads the same registers
// and queue configuration back; then `after` checks traffic on the
// restored device. Returns the saved bytes.
inline std::vector<std::uint8_t> check_state_round_trip(
    TestBed& bed, const std::function<std::unique_ptr<VirtioDevice>()>& make_restored,
    const std::function<void(TestBed&)>& before, const std::function<void(TestBed&)>& after,
    std::uint64_t features = 0) {
    if ((bed.reg(mmio_reg::kStatus) & kStatusDriverOk) == 0) {
        bed.start(features);
    }
    before(bed);
    auto quiesced = bed.transport->quiesce();
    REQUIRE_MESSAGE(quiesced.has_value(), (quiesced ? "" : quiesced.error().to_string()));
    std::vector<std::uint8_t> bytes = bed.transport->save_state();
    const MmioTransportState saved = bed.transport->save();
    CHECK(bed.transport->save_state() == bytes);  // saving changes nothing
    const DriverView view = driver_view(bed);
    bed.replace(make_restored());
    auto restored = bed.transport->restore_state(bytes);
    REQUIRE_MESSAGE(restored.has_value(), (restored ? "" : restored.error().to_string()));
    check_same_configuration(saved, bed.transport->save());
    CHECK(driver_view(bed) == view);
    CHECK_FALSE(bed.needs_reset());
    after(bed);
    CHECK_FALSE(bed.needs_reset());
    return bytes;
}

// A transport snapshot taken apart, so tests can corrupt one piece and put
// it back together (MmioTransport::save_state's layout).
struct SavedTransport {
    std::uint16_t version = 0;
    std::uint32_t type = 0;
    MmioTransportState state;
    std::vector<std::uint8_t> device;

    static SavedTransport parse(std::span<const std::uint8_t> bytes) {
        ByteReader in(bytes);
        SavedTransport s;
        s.version = in.u16();
        s.type = in.u32();
        auto state = MmioTransportState::decode(in);
        REQUIRE(state.has_value());
        s.state = *state;
        auto device = in.blob(MmioTransport::kMaxDeviceStateBytes);
        s.device.assign(device.begin(), device.end());
        REQUIRE(in.finish("test"));
        return s;
    }
    [[nodiscard]] std::vector<std::uint8_t> bytes() const {
        ByteWriter out;
        out.u16(version);
        out.u32(type);
        state.encode(out);
        out.blob(device);
        return out.take();
    }
};

// Every refusal leaves the transport reset, as a fresh one: status 0, no
// queue ready, nothing raised in the interrupt status.
inline void check_refused(TestBed& bed, std::span<const std::uint8_t> bytes, const char* what) {
    CAPTURE(what);
    auto r = bed.transport->restore_state(bytes);
    CHECK_FALSE(r.has_value());
    CHECK(bed.reg(mmio_reg::kStatus) == 0);
    CHECK(bed.reg(mmio_reg::kInterruptStatus) == 0);
    for (std::uint32_t i = 0; i < bed.transport->queue_count(); ++i) {
        bed.set_reg(mmio_reg::kQueueSel, i);
        CHECK(bed.reg(mmio_reg::kQueueReady) == 0);
    }
    bed.set_reg(mmio_reg::kQueueSel, 0);
}

// The refusals every device passes, on a snapshot of a started device:
// every truncation, a trailing byte, another state version, another device
// type, a queue more or less, another queue maximum, a ring outside memory,
// features the device does not offer, a status no driver produces, a
// device state cut short or too long. The snapshot itself still restores
// on the same transport afterwards.
inline void check_state_refusals(const std::function<std::unique_ptr<VirtioDevice>()>& make) {
    TestBed bed(make());
    bed.start();
    REQUIRE(bed.transport->quiesce());
    const std::vector<std::uint8_t> good = bed.transport->save_state();
    const SavedTransport parts = SavedTransport::parse(good);
    bed.replace(make());

    for (std::size_t n = 0; n < good.size(); ++n) {
        CAPTURE(n);
        check_refused(bed, std::span(good).first(n), "truncated");
    }
    auto longer = good;
    longer.push_back(0);
    check_refused(bed, longer, "a trailing byte");

    auto edit = [&](const std::function<void(SavedTransport&)>& change) {
        SavedTransport s = parts;
        change(s);
        return s.bytes();
    };
    check_refused(bed, edit([](SavedTransport& s) { s.version = 2; }), "another state version");
    check_refused(bed, edit([](SavedTransport& s) { s.type ^= 0x40; }), "another device type");
    check_refused(bed, edit([](SavedTransport& s) { s.state.queues.pop_back(); }), "a queue less");
    check_refused(bed, edit([](SavedTransport& s) { s.state.queues.push_back(s.state.queues.back()); }),
                  "a queue more");
    check_refused(bed, edit([](SavedTransport& s) { s.state.queues[0].max_size *= 2; }),
                  "another queue maximum");
    check_refused(bed,
                  edit([&](SavedTransport& s) { s.state.queues[0].used_ring = bed.memory.total_size() - 8; }),
                  "a ring outside memory");
    check_refused(bed, edit([](SavedTransport& s) { s.state.queues[0].size = 3; }),
                  "a queue size not a power of 2");
    check_refused(bed, edit([](SavedTransport& s) { s.state.queues[0].next_avail += 0x8000; }),
                  "more chains outstanding than the queue holds");
    check_refused(bed, edit([](SavedTransport& s) { s.state.driver_features |= 1ULL << 50; }),
                  "features not offered");
    check_refused(bed, edit([](SavedTransport& s) { s.state.driver_features &= ~kFeatureVersion1; }),
                  "features without VERSION_1");
    check_refused(bed, edit([](SavedTransport& s) { s.state.driver_features ^= kFeatureEventIdx; }),
                  "queues saved with another EVENT_IDX than negotiated");
    check_refused(bed, edit([](SavedTransport& s) { s.state.status |= 0x10; }), "an unknown status bit");
    check_refused(bed, edit([](SavedTransport& s) { s.state.status &= ~kStatusFeaturesOk; }),
                  "active queues on a device never activated");
    check_refused(bed, edit([](SavedTransport& s) { s.state.interrupt_status = 4; }),
                  "an unknown interrupt bit");
    check_refused(bed, edit([](SavedTransport& s) { s.state.queues[0].active = false; }),
                  "a ready queue inactive on a running device");
    check_refused(bed, edit([](SavedTransport& s) { s.device.clear(); }), "an empty device state");
    check_refused(bed, edit([](SavedTransport& s) { s.device.push_back(0); }), "a device state too long");
    check_refused(bed, edit([](SavedTransport& s) { s.device[0] ^= 0x7f; }), "another device state version");

    auto restored = bed.transport->restore_state(good);
    REQUIRE_MESSAGE(restored.has_value(), (restored ? "" : restored.error().to_string()));
    CHECK((bed.reg(mmio_reg::kStatus) & kStatusDriverOk) != 0);
    CHECK(bed.transport->save_state() == good);
}

}  // namespace sbx::virtio::testing

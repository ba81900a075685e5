// The transport with a minimal device (one queue that answers each chain
// with its readable bytes reversed): register semantics, feature
// negotiation, notifications and interrupts, NEEDS_RESET, snapshots, and
// the conformance checks.
#include "devices/virtio/mmio/mmio_transport.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include "devices/virtio/queue/chain_io.hpp"
#include "devices/virtio/virtio_test_util.hpp"

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::testing;

namespace {

class ReverseDevice final : public VirtioDevice {
public:
    [[nodiscard]] DeviceType type() const override { return DeviceType::Rng; }
    [[nodiscard]] std::string name() const override { return "test-reverse"; }
    [[nodiscard]] std::uint64_t features() const override { return 0; }
    [[nodiscard]] std::span<const std::uint16_t> queue_sizes() const override { return sizes_; }
    void read_config(std::uint64_t offset, std::span<std::uint8_t> data) const override {
        read_config_bytes(config_, offset, data);
    }
    Result<void> activate(const ActiveContext& context) override {
        context_ = context;
        return ok();
    }
    Result<void> process_queue(std::size_t index) override {
        Queue& q = context_.queues[index];
        bool returned = false;
        while (true) {
            auto popped = q.pop(chain_);
            if (!popped) {
                return popped.error();
            }
            if (!*popped) {
                break;
            }
            std::vector<std::uint8_t> data(ChainReader(chain_).remaining());
            ChainReader(chain_).read(data);
            std::reverse(data.begin(), data.end());
            ChainWriter writer(chain_);
            if (auto r = writer.write_exact(data); !r) {
                return r.error();
            }
            if (auto r = q.add_used(chain_.head(), writer.written()); !r) {
                return r.error();
            }
            ++answered_;
            returned = true;
        }
        if (returned && q.needs_notification()) {
            context_.interrupt->signal_used();
        }
        return ok();
    }
    void reset() override {
        context_ = {};
        calls_.push_back("reset");
    }

    Result<void> quiesce() override {
        calls_.push_back("quiesce");
        return ok();
    }
    void save_state(ByteWriter& out) const override {
        out.u16(1);
        out.u32(answered_);
    }
    Result<void> restore_state(ByteReader& in) override {
        calls_.push_back(context_.memory == nullptr ? "restore_state" : "restore_state while active");
        const std::uint16_t version = in.u16();
        answered_ = in.u32();
        if (version != 1) {
            return make_error("version {}", version);
        }
        return ok();
    }
    Result<void> after_restore() override {
        calls_.push_back(context_.memory != nullptr ? "after_restore" : "after_restore while inactive");
        return ok();
    }

    [[nodiscard]] std::uint32_t answered() const { return answered_; }
    // The snapshot hooks called, in order.
    [[nodiscard]] const std::vector<std::string>& calls() const { return calls_; }

private:
    std::array<std::uint16_t, 1> sizes_{16};
    std::array<std::uint8_t, 4> config_{0xaa, 0xbb, 0xcc, 0xdd};
    ActiveContext context_;
    DescriptorChain chain_;
    std::uint32_t answered_ = 0;
    std::vector<std::string> calls_;
};

std::unique_ptr<VirtioDevice> make() { return std::make_unique<ReverseDevice>(); }

const ReverseDevice& device_of(const TestBed& bed) {
    return dynamic_cast<const ReverseDevice&>(bed.transport->device());
}

// Offers {seed, seed+1, seed+2} and room for the answer.
OfferedChain offer_three(TestBed& bed, std::uint8_t seed) {
    std::vector<std::vector<std::uint8_t>> in = {
        {seed, static_cast<std::uint8_t>(seed + 1), static_cast<std::uint8_t>(seed + 2)}};
    return bed.drivers[0]->offer(in, std::array<std::uint32_t, 1>{3});
}

void check_answered(TestBed& bed, const OfferedChain& chain, std::uint8_t seed) {
    auto used = bed.drivers[0]->take_used();
    REQUIRE(used);
    CHECK(used->head == chain.head);
    CHECK(bed.drivers[0]->read(chain.writable[0].first, 3) ==
          std::vector<std::uint8_t>{static_cast<std::uint8_t>(seed + 2), static_cast<std::uint8_t>(seed + 1),
                                    seed});
}

}  // namespace

TEST_CASE("conformance") { check_conformance(make, DeviceType::Rng, 0); }

TEST_CASE("a chain is processed on notify and the driver is interrupted") {
    TestBed bed(make());
    bed.start();
    std::vector<std::vector<std::uint8_t>> in = {{1, 2, 3}};
    std::array<std::uint32_t, 1> out{3};
    auto offered = bed.drivers[0]->offer(in, out);
    bed.notify(0);
    auto used = bed.drivers[0]->take_used();
    REQUIRE(used);
    CHECK(used->len == 3);
    CHECK(bed.drivers[0]->read(offered.writable[0].first, 3) == std::vector<std::uint8_t>{3, 2, 1});
    CHECK(bed.irq.count == 1);
    CHECK(bed.reg(mmio_reg::kInterruptStatus) == kInterruptUsedBuffer);
    bed.set_reg(mmio_reg::kInterruptAck, kInterruptUsedBuffer);
    CHECK(bed.reg(mmio_reg::kInterruptStatus) == 0);
}

TEST_CASE("a QueueNotify write reaching the bus is the same as the ioeventfd") {
    TestBed bed(make());
    bed.start();
    std::vector<std::vector<std::uint8_t>> in = {{7}};
    std::array<std::uint32_t, 1> out{1};
    bed.drivers[0]->offer(in, out);
    bed.set_reg(mmio_reg::kQueueNotify, 0);
    CHECK(bed.drivers[0]->take_used());
    bed.set_reg(mmio_reg::kQueueNotify, 5);  // no such queue: ignored
    CHECK_FALSE(bed.needs_reset());
}

TEST_CASE("a chain the device cannot write its answer into means NEEDS_RESET") {
    TestBed bed(make());
    bed.start();
    std::vector<std::vector<std::uint8_t>> in = {{1, 2, 3}};
    bed.drivers[0]->offer(in, {});  // no writable buffer at all
    bed.notify(0);
    CHECK(bed.needs_reset());
    // Further notifications are ignored until the driver resets the device.
    bed.drivers[0]->offer(in, std::array<std::uint32_t, 1>{3});
    bed.notify(0);
    CHECK_FALSE(bed.drivers[0]->take_used());
}

TEST_CASE("config space is read at any width") {
    TestBed bed(make());
    CHECK(bed.config32(0) == 0xddccbbaa);
    std::uint8_t b = 0;
    bed.transport->read(mmio_reg::kConfig + 2, std::span(&b, 1));
    CHECK(b == 0xcc);
}

TEST_CASE("queue registers are ignored once the driver is running") {
    TestBed bed(make());
    bed.start();
    bed.set_reg(mmio_reg::kQueueSel, 0);
    bed.set_reg(mmio_reg::kQueueNum, 4);
    bed.set_reg(mmio_reg::kQueueDescLow, 0x1000);
    std::vector<std::vector<std::uint8_t>> in = {{9}};
    bed.drivers[0]->offer(in, std::array<std::uint32_t, 1>{1});
    bed.notify(0);
    CHECK(bed.drivers[0]->take_used());
    CHECK_FALSE(bed.needs_reset());
}

TEST_CASE("state records the queues") {
    TestBed bed(make());
    bed.start();
    auto s = bed.transport->save();
    CHECK((s.status & kStatusDriverOk) != 0);
    REQUIRE(s.queues.size() == 1);
    CHECK(s.queues[0].active);
}

TEST_CASE("snapshot: round trip; a chain made available but never notified is processed on restore") {
    TestBed bed(make());
    OfferedChain pending;
    auto bytes = check_state_round_trip(
        bed, make,
        [&](TestBed& b) {
            for (std::uint8_t i = 0; i < 20; ++i) {  // wraps the 16-entry rings
                auto chain = offer_three(b, i);
                b.notify(0);
                check_answered(b, chain, i);
            }
            pending = offer_three(b, 100);  // its notification is lost with the old VM
        },
        [&](TestBed& b) {
            CHECK(device_of(b).calls() ==
                  std::vector<std::string>{"reset", "restore_state", "after_restore"});
            CHECK(device_of(b).answered() == 21);
            check_answered(b, pending, 100);
            auto chain = offer_three(b, 200);
            b.notify(0);
            check_answered(b, chain, 200);
        });
    auto saved = SavedTransport::parse(bytes);
    CHECK(saved.state.queues[0].next_avail == 20);
    CHECK(saved.state.queues[0].next_used == 20);
}

TEST_CASE("snapshot: quiesce reaches only a running device") {
    TestBed bed(make());
    REQUIRE(bed.transport->quiesce());
    CHECK(device_of(bed).calls().empty());
    bed.start();
    REQUIRE(bed.transport->quiesce());
    CHECK(device_of(bed).calls().back() == "quiesce");
}

TEST_CASE("snapshot: a transport mid-negotiation restores without activating the device") {
    TestBed bed(make());
    bed.set_reg(mmio_reg::kStatus, kStatusAcknowledge | kStatusDriver);
    bed.setup_queue(0, 8);
    auto bytes = bed.transport->save_state();
    bed.replace(make());
    REQUIRE(bed.transport->restore_state(bytes));
    CHECK(bed.reg(mmio_reg::kStatus) == (kStatusAcknowledge | kStatusDriver));
    CHECK(bed.transport->save_state() == bytes);
    CHECK(device_of(bed).calls() == std::vector<std::string>{"reset", "restore_state"});
    // The driver carries on from there.
    REQUIRE((bed.negotiate(bed.device_features()) & kStatusFeaturesOk) != 0);
}

TEST_CASE("snapshot: NEEDS_RESET is restored as it was, the device left idle until the driver resets") {
    TestBed bed(make());
    bed.start();
    std::vector<std::vector<std::uint8_t>> in = {{1}};
    bed.drivers[0]->offer(in, {});
    bed.notify(0);
    REQUIRE(bed.needs_reset());
    auto bytes = bed.transport->save_state();
    bed.replace(make());
    REQUIRE(bed.transport->restore_state(bytes));
    CHECK(bed.needs_reset());
    CHECK(device_of(bed).calls() == std::vector<std::string>{"reset", "restore_state"});
    bed.set_reg(mmio_reg::kStatus, 0);
    bed.start();
    auto chain = offer_three(bed, 1);
    bed.notify(0);
    check_answered(bed, chain, 1);
}

TEST_CASE("snapshot: a pending interrupt status raises the line again") {
    TestBed bed(make());
    bed.start();
    auto chain = offer_three(bed, 1);
    bed.notify(0);
    check_answered(bed, chain, 1);
    REQUIRE(bed.reg(mmio_reg::kInterruptStatus) == kInterruptUsedBuffer);
    auto bytes = bed.transport->save_state();
    bed.replace(make());
    const int before = bed.irq.count;
    REQUIRE(bed.transport->restore_state(bytes));
    CHECK(bed.irq.count == before + 1);
    CHECK(bed.reg(mmio_reg::kInterruptStatus) == kInterruptUsedBuffer);
}

TEST_CASE("snapshot: a restore replaces what a used transport had") {
    TestBed bed(make());
    bed.set_reg(mmio_reg::kStatus, kStatusAcknowledge | kStatusDriver);
    auto bytes = bed.transport->save_state();
    bed.start();
    auto chain = offer_three(bed, 1);
    bed.notify(0);
    check_answered(bed, chain, 1);
    REQUIRE(bed.transport->restore_state(bytes));
    CHECK(bed.reg(mmio_reg::kStatus) == (kStatusAcknowledge | kStatusDriver));
    CHECK(bed.reg(mmio_reg::kQueueReady) == 0);
    CHECK(bed.transport->save_state() == bytes);
}

TEST_CASE("snapshot: corrupt and mismatched states are refused, the transport left reset") {
    check_state_refusals(make);
}

TEST_CASE("snapshot: a device state the device refuses is refused") {
    TestBed bed(make());
    bed.start();
    auto parts = SavedTransport::parse(bed.transport->save_state());
    parts.device = {2, 0, 0, 0, 0, 0};  // version 2
    bed.replace(make());
    check_refused(bed, parts.bytes(), "device state version");
}

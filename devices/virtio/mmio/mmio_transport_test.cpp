// The transport with a minimal device (one queue that answers each chain
// with its readable bytes reversed): register semantics, feature
// negotiation, notifications and interrupts, NEEDS_RESET, and the
// conformance checks.
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
        }
        if (q.needs_notification()) {
            context_.interrupt->signal_used();
        }
        return ok();
    }
    void reset() override { context_ = {}; }

private:
    std::array<std::uint16_t, 1> sizes_{16};
    std::array<std::uint8_t, 4> config_{0xaa, 0xbb, 0xcc, 0xdd};
    ActiveContext context_;
    DescriptorChain chain_;
};

std::unique_ptr<VirtioDevice> make() { return std::make_unique<ReverseDevice>(); }

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

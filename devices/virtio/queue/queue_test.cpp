// The split-ring device side: activation checks, popping and returning
// chains, notification suppression with and without EVENT_IDX, and state.
#include "devices/virtio/queue/queue.hpp"

#include <doctest/doctest.h>

#include "devices/virtio/queue/mock_driver.hpp"

using namespace sbx;
using namespace sbx::virtio;
using sbx::virtio::testing::MockDriver;

namespace {

GuestMemory memory16m() {
    MemoryRegionSpec spec{GuestAddress(0), 16 << 20};
    return GuestMemory::create(std::span(&spec, 1)).value();
}

std::vector<std::vector<std::uint8_t>> one_byte() { return {{42}}; }

}  // namespace

TEST_CASE("activation checks size and ring placement (§2.7)") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    Queue q(16);
    driver.configure(q);
    SUBCASE("valid") { CHECK(q.activate(memory, false)); }
    SUBCASE("size not a power of two") {
        q.set_size(6);
        CHECK_FALSE(q.activate(memory, false));
    }
    SUBCASE("size zero") {
        q.set_size(0);
        CHECK_FALSE(q.activate(memory, false));
    }
    SUBCASE("size above the maximum") {
        q.set_size(32);
        CHECK_FALSE(q.activate(memory, false));
    }
    SUBCASE("misaligned descriptor table") {
        q.set_desc_table(driver.desc_table().value + 8);
        CHECK_FALSE(q.activate(memory, false));
    }
    SUBCASE("misaligned used ring") {
        q.set_used_ring(q.used_ring() + 2);
        CHECK_FALSE(q.activate(memory, false));
    }
    SUBCASE("avail ring outside memory") {
        q.set_avail_ring((16 << 20) - 4);
        CHECK_FALSE(q.activate(memory, false));
    }
    CHECK(q.active() == q.activate(memory, false).has_value());
}

TEST_CASE("pop and add_used round trip") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    Queue q(8);
    driver.configure(q);
    REQUIRE(q.activate(memory, false));
    DescriptorChain chain;
    CHECK_FALSE(*q.pop(chain));  // nothing offered yet
    auto bufs = one_byte();
    std::array<std::uint32_t, 1> lens{4};
    auto offered = driver.offer(bufs, lens);
    CHECK(*q.has_available());
    REQUIRE(*q.pop(chain));
    CHECK(chain.head() == offered.head);
    CHECK_FALSE(*q.has_available());
    REQUIRE(q.add_used(chain.head(), 3));
    auto used = driver.take_used();
    REQUIRE(used);
    CHECK(used->head == offered.head);
    CHECK(used->len == 3);
    CHECK_FALSE(driver.take_used());
}

TEST_CASE("undo_pop hands the same chain out again") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    Queue q(8);
    driver.configure(q);
    REQUIRE(q.activate(memory, false));
    auto bufs = one_byte();
    auto offered = driver.offer(bufs, {});
    DescriptorChain chain;
    REQUIRE(*q.pop(chain));
    q.undo_pop();
    REQUIRE(*q.pop(chain));
    CHECK(chain.head() == offered.head);
}

TEST_CASE("hostile available ring") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    Queue q(8);
    driver.configure(q);
    REQUIRE(q.activate(memory, false));
    DescriptorChain chain;
    SUBCASE("index jumps past the queue size") {
        driver.set_avail_idx(9);
        CHECK_FALSE(q.pop(chain));
    }
    SUBCASE("more chains held than the queue has entries: a head made available again") {
        auto bufs = one_byte();
        auto offered = driver.offer(bufs, {});
        REQUIRE(*q.pop(chain));
        for (int held = 1; held < 8; ++held) {
            driver.publish(offered.head);
            REQUIRE(*q.pop(chain));
        }
        driver.publish(offered.head);  // a ninth chain on a queue of 8
        CHECK_FALSE(q.pop(chain));
        REQUIRE(q.add_used(offered.head, 0));  // one came back: one more may go out
        REQUIRE(*q.pop(chain));
    }
    SUBCASE("head index beyond the table") {
        driver.publish(200);
        CHECK_FALSE(q.pop(chain));
    }
    SUBCASE("an inactive queue is never popped") {
        q.reset();
        CHECK_FALSE(q.pop(chain));
        CHECK_FALSE(q.add_used(0, 0));
    }
}

TEST_CASE("interrupt suppression without EVENT_IDX follows NO_INTERRUPT") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    Queue q(8);
    driver.configure(q);
    REQUIRE(q.activate(memory, false));
    REQUIRE(q.add_used(0, 0));
    CHECK(q.needs_notification());
    driver.set_avail_flags(1);
    REQUIRE(q.add_used(0, 0));
    CHECK_FALSE(q.needs_notification());
}

TEST_CASE("interrupt suppression with EVENT_IDX follows used_event (§2.7.7.2)") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    Queue q(8);
    driver.configure(q);
    REQUIRE(q.activate(memory, true));
    driver.set_used_event(2);  // interrupt when used idx passes 2
    REQUIRE(q.add_used(0, 0));  // used idx 1
    CHECK(q.needs_notification());  // the first decision always notifies
    REQUIRE(q.add_used(0, 0));  // 2
    CHECK_FALSE(q.needs_notification());
    REQUIRE(q.add_used(0, 0));  // 3: crossed used_event + 1
    CHECK(q.needs_notification());
    CHECK_FALSE(q.needs_notification());  // nothing new
}

TEST_CASE("device notification suppression") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    SUBCASE("without EVENT_IDX: the used ring's NO_NOTIFY flag") {
        Queue q(8);
        driver.configure(q);
        REQUIRE(q.activate(memory, false));
        q.disable_notification();
        CHECK(driver.used_flags() == 1);
        CHECK_FALSE(*q.enable_notification());
        CHECK(driver.used_flags() == 0);
    }
    SUBCASE("with EVENT_IDX: avail_event, and a race is reported") {
        Queue q(8);
        driver.configure(q);
        REQUIRE(q.activate(memory, true));
        auto bufs = one_byte();
        driver.offer(bufs, {});
        DescriptorChain chain;
        REQUIRE(*q.pop(chain));
        CHECK_FALSE(*q.enable_notification());
        CHECK(driver.avail_event() == 1);
        driver.offer(bufs, {});
        CHECK(*q.enable_notification());  // the driver added one meanwhile
    }
}

TEST_CASE("state round trip, and a hostile state is refused") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    Queue q(8);
    driver.configure(q);
    REQUIRE(q.activate(memory, true));
    auto bufs = one_byte();
    driver.offer(bufs, {});
    DescriptorChain chain;
    REQUIRE(*q.pop(chain));
    QueueState s = q.save();
    CHECK(s.next_avail == 1);
    CHECK(s.active);

    Queue restored(8);
    REQUIRE(restored.restore(memory, s));
    CHECK(restored.active());
    CHECK_FALSE(*restored.has_available());
    driver.offer(bufs, {});
    CHECK(*restored.pop(chain));

    QueueState bad = s;
    bad.used_ring = (16 << 20) - 8;
    Queue refused(8);
    CHECK_FALSE(refused.restore(memory, bad));
    bad = s;
    bad.max_size = 16;
    CHECK_FALSE(refused.restore(memory, bad));
    bad = s;
    bad.next_avail = 10;  // 10 chains outstanding on a queue of 8
    CHECK_FALSE(refused.restore(memory, bad));
    CHECK_FALSE(refused.active());
    bad = s;
    bad.active = false;  // positions on a queue never activated
    CHECK_FALSE(refused.restore(memory, bad));
}

TEST_CASE("queue state encoding round trips; truncation and another version are refused") {
    QueueState s{256, 128, true, 0x1000, 0x2000, 0x3000, 7, 5, 4, true, true, false, true};
    ByteWriter out;
    s.encode(out);
    const auto bytes = out.take();
    ByteReader in(bytes);
    auto decoded = QueueState::decode(in);
    REQUIRE(decoded.has_value());
    REQUIRE(in.finish("queue"));
    ByteWriter again;
    decoded->encode(again);
    CHECK(again.bytes() == bytes);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        ByteReader cut{std::span(bytes).first(n)};
        CHECK_FALSE(QueueState::decode(cut).has_value());
    }
    auto other = bytes;
    other[0] = 2;
    ByteReader versioned(other);
    CHECK_FALSE(QueueState::decode(versioned).has_value());
    auto bad_bool = bytes;
    bad_bool[6] = 2;  // `ready`
    ByteReader boolean(bad_bool);
    CHECK_FALSE(QueueState::decode(boolean).has_value());
}

TEST_CASE("pop_or_enable_notification drains, then re-enables and catches a late buffer") {
    auto memory = memory16m();
    MockDriver driver(memory, GuestAddress(0x100000), 8);
    Queue q(8);
    driver.configure(q);
    REQUIRE(q.activate(memory, false));
    auto bufs = one_byte();
    driver.offer(bufs, {});
    q.disable_notification();
    DescriptorChain chain;
    CHECK(*q.pop_or_enable_notification(chain));
    CHECK(driver.used_flags() == 1);           // still suppressed while draining
    CHECK_FALSE(*q.pop_or_enable_notification(chain));
    CHECK(driver.used_flags() == 0);           // empty: the driver will notify
}

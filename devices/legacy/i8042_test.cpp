#include <doctest/doctest.h>

#include <vector>

#include "devices/device_test_util.hpp"
#include "devices/legacy/i8042.hpp"

using namespace sbx;

using namespace sbx::testing;

TEST_CASE("i8042 pulse-reset command calls the reset handler") {
    CountingIrq irq;
    int resets = 0;
    I8042 dev(irq, [&] { ++resets; });
    CHECK((rd(dev, 4) & 0x02) == 0);  // input buffer empty: the guest may write
    wr(dev, 4, 0xfe);
    CHECK(resets == 1);
}

TEST_CASE("i8042 output-port write with bit 0 clear resets") {
    CountingIrq irq;
    int resets = 0;
    I8042 dev(irq, [&] { ++resets; });
    wr(dev, 4, 0xd1);
    wr(dev, 0, 0x01);
    CHECK(resets == 0);
    wr(dev, 4, 0xd1);
    wr(dev, 0, 0x00);
    CHECK(resets == 1);
}

TEST_CASE("i8042 control register round-trips through commands 0x20/0x60") {
    CountingIrq irq;
    I8042 dev(irq, {});
    wr(dev, 4, 0x60);
    wr(dev, 0, 0x47);
    wr(dev, 4, 0x20);
    CHECK((rd(dev, 4) & 0x01) == 0x01);
    CHECK(rd(dev, 0) == 0x47);
    CHECK((rd(dev, 4) & 0x01) == 0);
}

TEST_CASE("i8042 self-test and keyboard reset answers") {
    CountingIrq irq;
    I8042 dev(irq, {});
    wr(dev, 4, 0xaa);
    CHECK(rd(dev, 0) == 0x55);
    wr(dev, 0, 0xff);  // keyboard reset
    CHECK(rd(dev, 0) == 0xfa);
    CHECK(rd(dev, 0) == 0xaa);
    CHECK(irq.count >= 2);
}

TEST_CASE("i8042 output is bounded when the guest never reads") {
    CountingIrq irq;
    I8042 dev(irq, {});
    for (int i = 0; i < 1000; ++i) {
        wr(dev, 0, 0xf4);
    }
    int n = 0;
    while ((rd(dev, 4) & 0x01) != 0 && n < 2000) {
        rd(dev, 0);
        ++n;
    }
    CHECK(n <= 16);
}

namespace {

std::vector<std::uint8_t> encoded(const I8042::State& state) {
    ByteWriter out;
    state.encode(out);
    return out.take();
}

}  // namespace

TEST_CASE("i8042 state round trip: registers, a command waiting for data, output waiting for the guest") {
    CountingIrq irq_a;
    I8042 a(irq_a, {});
    wr(a, 4, 0x60);  // write control
    wr(a, 0, 0x45);  // keyboard interrupt, SYS, translate
    wr(a, 4, 0xaa);  // self-test: 0x55 waits in the output buffer
    wr(a, 4, 0xd1);  // write output port: waits for its data byte
    const auto bytes = encoded(a.save());
    ByteReader in(bytes);
    auto state = I8042::State::decode(in);
    REQUIRE(state.has_value());
    REQUIRE(in.finish("i8042"));

    CountingIrq irq_b;
    I8042 b(irq_b, {});
    REQUIRE(b.restore(*state));
    CHECK(irq_b.count == 1);  // output waits and the keyboard interrupt is on
    CHECK((rd(b, 4) & 0x01) == 0x01);
    CHECK(rd(b, 0) == 0x55);
    CHECK((rd(b, 4) & 0x01) == 0);
    wr(b, 0, 0x03);  // the data byte of 0xd1
    wr(b, 4, 0xd0);
    CHECK(rd(b, 0) == 0x03);
    wr(b, 4, 0x20);
    CHECK(rd(b, 0) == 0x45);
}

TEST_CASE("i8042 state decoding refuses corrupt input; a refused restore changes nothing") {
    CountingIrq irq;
    I8042 a(irq, {});
    wr(a, 4, 0xaa);
    const I8042::State good = a.save();
    const auto bytes = encoded(good);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        CAPTURE(n);
        ByteReader cut{std::span(bytes).first(n)};
        CHECK_FALSE(I8042::State::decode(cut).has_value());
    }
    auto refused = [](const I8042::State& state) {
        const auto b = encoded(state);
        ByteReader reader(b);
        return !I8042::State::decode(reader).has_value();
    };
    I8042::State bad = good;
    bad.pending_command = 0xaa;
    CHECK(refused(bad));
    bad = good;
    bad.output.assign(I8042::kOutputLimit + 1, 0xfa);
    CHECK(refused(bad));
    auto other_version = bytes;
    other_version[0] = 2;
    ByteReader versioned(other_version);
    CHECK_FALSE(I8042::State::decode(versioned).has_value());

    I8042 b(irq, {});
    bad = good;
    bad.pending_command = 0xfe;
    CHECK_FALSE(b.restore(bad).has_value());
    CHECK((rd(b, 4) & 0x01) == 0);  // still empty
}

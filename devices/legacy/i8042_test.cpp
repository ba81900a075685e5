#include <doctest/doctest.h>

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

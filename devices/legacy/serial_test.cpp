#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "devices/device_test_util.hpp"
#include "devices/legacy/serial.hpp"

using namespace sbx;

using namespace sbx::testing;

TEST_CASE("serial hands transmitted bytes to the VMM and notifies once per batch") {
    CountingIrq irq;
    int notified = 0;
    Serial s(irq, [&] { ++notified; });
    for (char c : std::string("hi\nthere")) {
        wr(s, 0, static_cast<std::uint8_t>(c));
    }
    CHECK(notified == 1);  // only the first byte into an empty buffer notifies
    std::string out;
    s.take_output(out);
    CHECK(out == "hi\nthere");
    wr(s, 0, '!');
    CHECK(notified == 2);
    CHECK((rd(s, 5) & 0x60) == 0x60);  // THR empty, idle
}

TEST_CASE("serial output is bounded when nobody takes it") {
    CountingIrq irq;
    Serial s(irq, {});
    for (std::size_t i = 0; i < Serial::kOutputLimit + 100; ++i) {
        wr(s, 0, 'x');
    }
    std::string out;
    s.take_output(out);
    CHECK(out.size() == Serial::kOutputLimit);
    CHECK(s.dropped_output_bytes() == 100);
}

TEST_CASE("serial interrupt fires on rising edges only") {
    CountingIrq irq;
    Serial s(irq, {});
    wr(s, 1, 0x02);  // IER: THR empty -> INTR rises
    CHECK(irq.count == 1);
    for (int i = 0; i < 16; ++i) {
        wr(s, 0, 'a');  // INTR stays high: no new edges
    }
    CHECK(irq.count == 1);
    CHECK((rd(s, 2) & 0x0f) == 0x02);  // acknowledging THRE lowers INTR
    wr(s, 0, 'b');                     // and the next byte raises it again
    CHECK(irq.count == 2);
}

TEST_CASE("serial FCR clears the receive FIFO and reports FIFO state in IIR") {
    CountingIrq irq;
    Serial s(irq, {});
    CHECK((rd(s, 2) & 0xc0) == 0);  // FIFOs off after reset
    const std::uint8_t in[] = {'a', 'b'};
    s.enqueue_input(in);
    wr(s, 2, 0x07);  // enable, clear RX and TX
    CHECK((rd(s, 2) & 0xc0) == 0xc0);
    CHECK((rd(s, 5) & 0x01) == 0);
}

TEST_CASE("serial raises THRE when enabled and IIR acknowledges it") {
    CountingIrq irq;
    Serial s(irq, {});
    CHECK((rd(s, 2) & 0x0f) == 0x01);  // nothing pending
    wr(s, 1, 0x02);                    // IER: THR empty
    CHECK(irq.count == 1);
    CHECK((rd(s, 2) & 0x0f) == 0x02);
    CHECK((rd(s, 2) & 0x0f) == 0x01);  // acknowledged by the read
    wr(s, 2, 0x01);                    // FIFO enable
    CHECK((rd(s, 2) & 0xc0) == 0xc0);  // FIFOs reported: a 16550A
}

TEST_CASE("serial input sets data ready and raises the RX interrupt") {
    CountingIrq irq;
    Serial s(irq, {});
    wr(s, 1, 0x01);  // IER: RX data
    const std::uint8_t in[] = {'a', 'b'};
    CHECK(s.enqueue_input(in) == 2);
    CHECK(irq.count >= 1);
    CHECK((rd(s, 5) & 0x01) == 0x01);
    CHECK((rd(s, 2) & 0x0f) == 0x04);
    CHECK(rd(s, 0) == 'a');
    CHECK(rd(s, 0) == 'b');
    CHECK((rd(s, 5) & 0x01) == 0);
}

TEST_CASE("serial input beyond the FIFO is refused, not buffered without bound") {
    CountingIrq irq;
    Serial s(irq, {});
    std::string big(1000, 'x');
    CHECK(s.enqueue_input(std::span(reinterpret_cast<const std::uint8_t*>(big.data()), big.size())) ==
          Serial::kRxFifoSize);
}

TEST_CASE("serial divisor latch and scratch register") {
    CountingIrq irq;
    Serial s(irq, {});
    wr(s, 3, 0x83);  // DLAB on
    wr(s, 0, 0x01);
    wr(s, 1, 0x00);
    CHECK(rd(s, 0) == 0x01);
    wr(s, 3, 0x03);  // DLAB off
    wr(s, 7, 0x5a);
    CHECK(rd(s, 7) == 0x5a);
}

TEST_CASE("serial loopback mirrors MCR into MSR and echoes THR") {
    CountingIrq irq;
    Serial s(irq, {});
    wr(s, 4, 0x1a);  // LOOP | OUT2 | RTS, as Linux's autoconfig does
    CHECK((rd(s, 6) & 0xf0) == 0x90);
    wr(s, 0, 'z');
    CHECK((rd(s, 5) & 0x01) == 0x01);
    CHECK(rd(s, 0) == 'z');
}

namespace {

// Save, encode, decode, and restore into `to`, as a snapshot would.
void snapshot_into(const Serial& from, Serial& to) {
    ByteWriter out;
    from.save().encode(out);
    const auto bytes = out.take();
    ByteReader in(bytes);
    auto state = Serial::State::decode(in);
    REQUIRE(state.has_value());
    REQUIRE(in.finish("serial"));
    REQUIRE(to.restore(*state));
}

std::vector<std::uint8_t> encoded(const Serial::State& state) {
    ByteWriter out;
    state.encode(out);
    return out.take();
}

}  // namespace

TEST_CASE("serial state round trip: registers, divisor latch, FIFO bytes, pending RX interrupt") {
    CountingIrq irq_a;
    Serial a(irq_a, {});
    wr(a, 3, 0x83);  // DLAB on: divisor 0x0201
    wr(a, 0, 0x01);
    wr(a, 1, 0x02);
    wr(a, 3, 0x1b);  // DLAB off, 8E1
    wr(a, 4, 0x0b);  // DTR, RTS, OUT2
    wr(a, 7, 0x33);
    wr(a, 2, 0x01);  // FIFOs on
    wr(a, 1, 0x01);  // RX data interrupt
    const std::uint8_t in[] = {'a', 'b', 'c'};
    REQUIRE(a.enqueue_input(in) == 3);
    CHECK(rd(a, 0) == 'a');

    CountingIrq irq_b;
    Serial b(irq_b, {});
    snapshot_into(a, b);
    CHECK(irq_b.count == 1);  // the pending RX interrupt is raised on the new line
    CHECK(rd(b, 3) == 0x1b);
    CHECK(rd(b, 4) == 0x0b);
    CHECK(rd(b, 7) == 0x33);
    CHECK(rd(b, 1) == 0x01);
    CHECK(rd(b, 2) == (0x04 | 0xc0));  // IIR: RX data, FIFOs enabled
    CHECK((rd(b, 5) & 0x01) == 0x01);
    CHECK(rd(b, 0) == 'b');
    CHECK(rd(b, 0) == 'c');
    CHECK((rd(b, 5) & 0x01) == 0);
    CHECK(rd(b, 2) == (0x01 | 0xc0));  // nothing pending
    wr(b, 3, 0x9b);
    CHECK(rd(b, 0) == 0x01);
    CHECK(rd(b, 1) == 0x02);
}

TEST_CASE("serial state round trip: a pending THR-empty interrupt, and none") {
    CountingIrq irq_a;
    Serial a(irq_a, {});
    wr(a, 1, 0x02);  // THRE interrupt: pending at once
    CountingIrq irq_b;
    Serial b(irq_b, {});
    snapshot_into(a, b);
    CHECK(irq_b.count == 1);
    CHECK((rd(b, 2) & 0x0f) == 0x02);
    CHECK((rd(b, 2) & 0x0f) == 0x01);  // reading IIR acknowledged it

    CountingIrq irq_c;
    Serial c(irq_c, {});
    snapshot_into(b, c);
    CHECK(irq_c.count == 0);
}

TEST_CASE("serial state decoding refuses corrupt input; a refused restore changes nothing") {
    CountingIrq irq;
    Serial a(irq, {});
    const std::uint8_t in[] = {'x', 'y'};
    a.enqueue_input(in);
    const Serial::State good = a.save();
    const auto bytes = encoded(good);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        CAPTURE(n);
        ByteReader cut{std::span(bytes).first(n)};
        CHECK_FALSE(Serial::State::decode(cut).has_value());
    }
    auto refused = [](const Serial::State& state) {
        const auto b = encoded(state);
        ByteReader reader(b);
        return !Serial::State::decode(reader).has_value();
    };
    Serial::State bad = good;
    bad.ier = 0x10;
    CHECK(refused(bad));
    bad = good;
    bad.rx_fifo = std::string(Serial::kRxFifoSize + 1, 'z');
    CHECK(refused(bad));
    auto other_version = bytes;
    other_version[0] = 9;
    ByteReader versioned(other_version);
    CHECK_FALSE(Serial::State::decode(versioned).has_value());
    auto bad_flag = bytes;
    bad_flag[10] = 7;  // fifo_enabled
    ByteReader flagged(bad_flag);
    CHECK_FALSE(Serial::State::decode(flagged).has_value());

    Serial b(irq, {});
    wr(b, 7, 0x44);
    bad = good;
    bad.scr = 0x55;
    bad.rx_fifo = std::string(100, 'z');
    CHECK_FALSE(b.restore(bad).has_value());
    CHECK(rd(b, 7) == 0x44);
    CHECK((rd(b, 5) & 0x01) == 0);
}

#include <doctest/doctest.h>

#include <string>

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

TEST_CASE("serial state round-trips") {
    CountingIrq irq;
    Serial a(irq, {});
    wr(a, 7, 0x33);
    wr(a, 1, 0x01);
    const std::uint8_t in[] = {'q'};
    a.enqueue_input(in);
    auto state = a.save();
    Serial b(irq, {});
    b.restore(state);
    CHECK(rd(b, 7) == 0x33);
    CHECK(rd(b, 1) == 0x01);
    CHECK(rd(b, 0) == 'q');
    CHECK((rd(b, 5) & 0x01) == 0);
}

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "devices/legacy/serial.hpp"

using namespace sbx;

namespace {
struct CountingIrq : InterruptLine {
    int count = 0;
    void trigger() override { ++count; }
};

std::uint8_t rd(Serial& s, std::uint64_t off) {
    std::uint8_t b = 0;
    s.read(off, std::span(&b, 1));
    return b;
}
void wr(Serial& s, std::uint64_t off, std::uint8_t v) { s.write(off, std::span<const std::uint8_t>(&v, 1)); }

std::string drain(int fd) {
    std::string out;
    char buf[256];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) {
        out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
}
}  // namespace

TEST_CASE("serial transmits line-buffered output to its fd") {
    int fds[2];
    REQUIRE(::pipe2(fds, O_NONBLOCK) == 0);
    CountingIrq irq;
    Serial s(irq, fds[1]);
    for (char c : std::string("hi\nthere")) {
        wr(s, 0, static_cast<std::uint8_t>(c));
    }
    CHECK(drain(fds[0]) == "hi\n");
    s.flush();
    CHECK(drain(fds[0]) == "there");
    CHECK((rd(s, 5) & 0x60) == 0x60);  // THR empty, idle
    ::close(fds[0]);
    ::close(fds[1]);
}

TEST_CASE("serial raises THRE when enabled and IIR acknowledges it") {
    CountingIrq irq;
    Serial s(irq, -1);
    CHECK((rd(s, 2) & 0x0f) == 0x01);  // nothing pending
    wr(s, 1, 0x02);                    // IER: THR empty
    CHECK(irq.count == 1);
    CHECK((rd(s, 2) & 0x0f) == 0x02);
    CHECK((rd(s, 2) & 0x0f) == 0x01);  // acknowledged by the read
    CHECK((rd(s, 2) & 0xc0) == 0xc0);  // FIFOs reported: a 16550A
}

TEST_CASE("serial input sets data ready and raises the RX interrupt") {
    CountingIrq irq;
    Serial s(irq, -1);
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
    Serial s(irq, -1);
    std::string big(1000, 'x');
    CHECK(s.enqueue_input(std::span(reinterpret_cast<const std::uint8_t*>(big.data()), big.size())) ==
          Serial::kRxFifoSize);
}

TEST_CASE("serial divisor latch and scratch register") {
    CountingIrq irq;
    Serial s(irq, -1);
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
    Serial s(irq, -1);
    wr(s, 4, 0x1a);  // LOOP | OUT2 | RTS, as Linux's autoconfig does
    CHECK((rd(s, 6) & 0xf0) == 0x90);
    wr(s, 0, 'z');
    CHECK((rd(s, 5) & 0x01) == 0x01);
    CHECK(rd(s, 0) == 'z');
}

TEST_CASE("serial state round-trips") {
    CountingIrq irq;
    Serial a(irq, -1);
    wr(a, 7, 0x33);
    wr(a, 1, 0x01);
    const std::uint8_t in[] = {'q'};
    a.enqueue_input(in);
    auto state = a.save();
    Serial b(irq, -1);
    b.restore(state);
    CHECK(rd(b, 7) == 0x33);
    CHECK(rd(b, 1) == 0x01);
    CHECK(rd(b, 0) == 'q');
    CHECK((rd(b, 5) & 0x01) == 0);
}

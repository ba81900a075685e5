// The UART against a model of the Linux 8250 driver's transmit path
// (drivers/tty/serial/8250/8250_port.c, 6.12: __start_tx, serial8250_tx_chars,
// __stop_tx, serial8250_console_write, and the ISR loop of
// serial8250_interrupt that reads IIR until "no interrupt"), on one CPU
// with an edge-triggered interrupt controller: an edge while the handler
// runs is latched and delivered after it. Random interleavings of tty
// writes, console writes, IER rewrites and interrupt deliveries must never
// leave bytes queued with no interrupt on its way: that is the state in
// which a guest's tty output stops mid-line for good.
#include <doctest/doctest.h>

#include <deque>
#include <random>
#include <string>

#include "devices/device_test_util.hpp"
#include "devices/legacy/serial.hpp"

using namespace sbx;
using namespace sbx::testing;

namespace {

constexpr std::uint8_t kIerThri = 0x02;
constexpr std::uint8_t kIirNoInt = 0x01;
constexpr std::uint8_t kLsrThre = 0x20;
constexpr std::size_t kTxLoad = 16;       // tx_loadsz of a 16550A
constexpr std::size_t kXmitSize = 4096;   // UART_XMIT_SIZE
constexpr int kPassLimit = 512;           // PASS_LIMIT of 8250_core.c

// An IOAPIC pin in edge mode plus the LAPIC's IRR bit for its vector.
struct EdgeLatch : InterruptLine {
    bool requested = false;
    void trigger() override { requested = true; }
};

struct Driver {
    Serial& uart;
    EdgeLatch& irq;
    std::deque<char> xmit;
    std::uint8_t ier = 0;  // up->ier, the driver's copy
    std::string sent;

    void out(std::uint64_t reg, std::uint8_t v) { wr(uart, reg, v); }
    std::uint8_t in(std::uint64_t reg) { return rd(uart, reg); }

    void stop_tx() {
        if ((ier & kIerThri) != 0) {
            ier &= static_cast<std::uint8_t>(~kIerThri);
            out(1, ier);
        }
    }
    void tx_chars() {
        if (xmit.empty()) {
            stop_tx();
            return;
        }
        for (std::size_t n = 0; n < kTxLoad && !xmit.empty(); ++n) {
            sent.push_back(xmit.front());
            out(0, static_cast<std::uint8_t>(xmit.front()));
            xmit.pop_front();
        }
        if (xmit.empty()) {
            stop_tx();
        }
    }
    // uart_write -> __start_tx: IER is written only when THRI was clear.
    void tty_write(std::size_t n, char c) {
        for (std::size_t i = 0; i < n && xmit.size() < kXmitSize; ++i) {
            xmit.push_back(c);
        }
        if ((ier & kIerThri) == 0) {
            ier |= kIerThri;
            out(1, ier);
        }
    }
    // serial8250_console_write: IER saved from the chip, cleared, bytes
    // polled out, IER put back.
    void console_write(std::size_t n) {
        const std::uint8_t saved = in(1);
        out(1, 0);
        for (std::size_t i = 0; i < n; ++i) {
            REQUIRE((in(5) & kLsrThre) != 0);
            out(0, 'k');
        }
        out(1, saved);
    }
    // The handler runs only when an edge was latched.
    void deliver() {
        if (!irq.requested) {
            return;
        }
        irq.requested = false;
        for (int pass = 0; pass < kPassLimit; ++pass) {
            if ((in(2) & kIirNoInt) != 0) {
                break;
            }
            if ((in(5) & kLsrThre) != 0 && (ier & kIerThri) != 0) {
                tx_chars();
            }
        }
    }
};

}  // namespace

TEST_CASE("no interleaving of the 8250 driver's transmit paths loses the THRE interrupt") {
    for (unsigned seed = 1; seed <= 200; ++seed) {
        CAPTURE(seed);
        EdgeLatch irq;
        Serial uart(irq, {});
        Driver d{uart, irq, {}, 0, {}};
        d.out(2, 0x07);  // FIFOs on and cleared, as serial8250_do_startup
        std::mt19937 rng(seed);
        std::string expected;
        for (int step = 0; step < 2000; ++step) {
            switch (rng() % 5) {
                case 0: {
                    const char c = static_cast<char>('a' + rng() % 26);
                    const std::size_t n = 1 + rng() % 300;
                    const std::size_t room = kXmitSize - d.xmit.size();
                    expected.append(std::min(n, room), c);
                    d.tty_write(n, c);
                    break;
                }
                case 1: d.console_write(1 + rng() % 40); break;
                case 2: d.out(1, d.ier); break;  // e.g. enable_ms: IER rewritten, THRI unchanged
                default: d.deliver(); break;
            }
            std::string ignored;
            uart.take_output(ignored);
            // Bytes queued with THRI on and nothing latched: nobody will ever send them.
            REQUIRE_FALSE((!d.xmit.empty() && !irq.requested));
        }
        for (int i = 0; i < 1000 && irq.requested; ++i) {
            d.deliver();
        }
        CHECK(d.xmit.empty());
        CHECK(d.sent == expected);
    }
}

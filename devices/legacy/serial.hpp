// A 16550A UART (TI/National PC16550D datasheet), enough for the Linux 8250
// driver: THR/RBR with a 64-byte receive FIFO, interrupt enable and
// identification, line/modem control and status, scratch, divisor latch,
// and loopback mode (which Linux uses to probe the port).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>

#include "base/byte_codec.hpp"
#include "devices/bus.hpp"
#include "devices/interrupt.hpp"

namespace sbx {

class Serial final : public BusDevice {
public:
    static constexpr std::uint64_t kPortCount = 8;
    static constexpr std::size_t kRxFifoSize = 64;
    // Transmitted bytes wait here for the VMM's event loop; when a console
    // reader stalls, bytes beyond this are dropped (and counted), so the
    // guest never blocks on its console.
    static constexpr std::size_t kOutputLimit = 64 * 1024;

    // on_output runs (under the device lock, so it must not block) when
    // output becomes available after take_output() emptied the buffer.
    Serial(InterruptLine& irq, std::function<void()> on_output)
        : irq_(irq), on_output_(std::move(on_output)) {}

    void read(std::uint64_t offset, std::span<std::uint8_t> data) override;
    void write(std::uint64_t offset, std::span<const std::uint8_t> data) override;

    // Host input for the guest; bytes beyond the FIFO's room are dropped and
    // the count of accepted bytes is returned.
    std::size_t enqueue_input(std::span<const std::uint8_t> bytes);
    // Moves the transmitted bytes into `out` (appending).
    void take_output(std::string& out);
    [[nodiscard]] std::uint64_t dropped_output_bytes() const;

    // What the guest can observe, for snapshots: the registers, the divisor
    // latch, the pending THR-empty interrupt (IIR and the line follow from
    // it, IER and the FIFO) and the receive FIFO's bytes. Output not yet
    // taken by the console is the host's and is not part of it.
    struct State {
        static constexpr std::uint16_t kVersion = 1;
        std::uint8_t ier = 0, lcr = 0, mcr = 0, lsr = 0, msr = 0, scr = 0, dll = 0, dlm = 0;
        bool fifo_enabled = false;
        bool thr_interrupt_pending = false;
        std::string rx_fifo;  // oldest byte first, at most kRxFifoSize

        // u16 version, the eight registers, the two flags, the FIFO as a blob.
        void encode(ByteWriter& out) const;
        // Refuses truncated input, another version, IER bits the UART does
        // not have and a FIFO longer than kRxFifoSize. The caller ends the
        // reader with finish() (trailing bytes).
        [[nodiscard]] static Result<State> decode(ByteReader& in);
    };
    [[nodiscard]] State save() const;
    // Refuses what decode() refuses (the device is then unchanged); raises
    // the interrupt line again when the restored state has one pending.
    [[nodiscard]] Result<void> restore(const State& state);

private:
    std::uint8_t read_register(std::uint64_t offset);
    void write_register(std::uint64_t offset, std::uint8_t value);
    void transmit(std::uint8_t byte);
    void update_interrupt();
    [[nodiscard]] bool dlab() const;
    [[nodiscard]] bool loopback() const;

    InterruptLine& irq_;
    std::function<void()> on_output_;
    mutable std::mutex mutex_;
    // Register reset values (PC16550D datasheet, Table IV "UART Reset Configuration").
    std::uint8_t ier_ = 0x00;
    std::uint8_t lcr_ = 0x03;  // 8 data bits, as firmware leaves it
    std::uint8_t mcr_ = 0x08;  // OUT2 set: interrupts routed to the PIC
    std::uint8_t lsr_ = 0x60;  // THR and transmitter empty
    std::uint8_t msr_ = 0xb0;  // DCD, DSR, CTS asserted: a cable is connected
    std::uint8_t scr_ = 0x00;
    std::uint8_t dll_ = 0x0c;  // 9600 baud
    std::uint8_t dlm_ = 0x00;
    bool fifo_enabled_ = false;
    bool thr_interrupt_pending_ = false;
    bool interrupt_level_ = false;  // the INTR pin; the irqfd fires on its rising edge
    std::deque<std::uint8_t> rx_fifo_;
    std::string out_buffer_;
    std::uint64_t dropped_output_ = 0;
};

}  // namespace sbx

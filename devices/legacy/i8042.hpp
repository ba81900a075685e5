// The i8042 keyboard controller, reduced to what a Linux guest uses: the
// controller command set, a keyboard that acknowledges commands, and the
// CPU reset line (command 0xFE, or bit 0 cleared in the output port), which
// a guest drives on `reboot` with reboot=k.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>

#include <vector>

#include "base/byte_codec.hpp"
#include "devices/bus.hpp"
#include "devices/interrupt.hpp"

namespace sbx {

class I8042 final : public BusDevice {
public:
    // Registered at port 0x60 with length 5: offset 0 is the data port,
    // offset 4 the status/command port (0x61-0x63 belong to others and are
    // absorbed here).
    static constexpr std::uint64_t kBasePort = 0x60;
    static constexpr std::uint64_t kPortCount = 5;
    // Bytes waiting for the guest to read them; more are dropped.
    static constexpr std::size_t kOutputLimit = 16;

    I8042(InterruptLine& keyboard_irq, std::function<void()> on_reset)
        : irq_(keyboard_irq), on_reset_(std::move(on_reset)) {}

    void read(std::uint64_t offset, std::span<std::uint8_t> data) override;
    void write(std::uint64_t offset, std::span<const std::uint8_t> data) override;

    // What the guest can observe, for snapshots: status, the controller's
    // command byte ("control"), the output port, a command waiting for its
    // data byte, and the bytes waiting in the output buffer.
    struct State {
        static constexpr std::uint16_t kVersion = 1;
        std::uint8_t status = 0, control = 0, output_port = 0, pending_command = 0;
        std::vector<std::uint8_t> output;  // oldest first, at most kOutputLimit

        // u16 version, the four registers, the output bytes as a blob.
        void encode(ByteWriter& out) const;
        // Refuses truncated input, another version, a pending command that
        // takes no data byte and more output than kOutputLimit. The caller
        // ends the reader with finish() (trailing bytes).
        [[nodiscard]] static Result<State> decode(ByteReader& in);
    };
    [[nodiscard]] State save() const;
    // Refuses what decode() refuses (the device is then unchanged); raises
    // the keyboard interrupt again when output waits and it is enabled.
    [[nodiscard]] Result<void> restore(const State& state);

private:
    void command(std::uint8_t cmd);
    void data_write(std::uint8_t value);
    void push_output(std::uint8_t byte);

    InterruptLine& irq_;
    std::function<void()> on_reset_;
    mutable std::mutex mutex_;
    std::uint8_t status_ = 0x14;       // SYS flag (self-test passed), keyboard not inhibited
    std::uint8_t control_ = 0x01 | 0x04;  // keyboard interrupt enabled, SYS flag
    std::uint8_t output_port_ = 0x01;  // bit 0 high: CPU not held in reset
    std::uint8_t pending_command_ = 0;  // a command waiting for its data byte
    std::deque<std::uint8_t> output_;
};

}  // namespace sbx

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

    I8042(InterruptLine& keyboard_irq, std::function<void()> on_reset)
        : irq_(keyboard_irq), on_reset_(std::move(on_reset)) {}

    void read(std::uint64_t offset, std::span<std::uint8_t> data) override;
    void write(std::uint64_t offset, std::span<const std::uint8_t> data) override;

    struct State {
        std::uint8_t status, control, output_port, pending_command;
    };
    [[nodiscard]] State save() const;
    void restore(const State& state);

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

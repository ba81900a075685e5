// A PCI host bridge reached through configuration mechanism #1: the
// CONFIG_ADDRESS register at port 0xcf8 and CONFIG_DATA at 0xcfc-0xcff
// (PCI Local Bus Specification 3.0, §3.2.2.3.2). One bus (0), one function
// per device; Linux finds it with its "conf1" probe (arch/x86/pci/direct.c).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "base/byte_codec.hpp"
#include "base/result.hpp"
#include "devices/bus.hpp"
#include "devices/pci/pci_function.hpp"

namespace sbx {

class PciHost final : public BusDevice {
public:
    static constexpr std::uint64_t kBasePort = 0xcf8;
    static constexpr std::uint64_t kPortCount = 8;
    static constexpr unsigned kSlots = 32;
    // 00:00.0, the host bridge itself (Red Hat 1b36:0008, class 0x0600):
    // Linux's conf1 probe accepts the mechanism once it finds a host bridge
    // on bus 0 (pci_sanity_check, when no DMI BIOS date says "2001 or later").
    static constexpr unsigned kHostBridgeSlot = 0;

    PciHost();

    // Puts `function` at 00:<slot>.0. Before the guest runs; refuses a slot
    // out of range or taken.
    [[nodiscard]] Result<void> attach(unsigned slot, PciFunction function);

    void read(std::uint64_t offset, std::span<std::uint8_t> data) override;
    void write(std::uint64_t offset, std::span<const std::uint8_t> data) override;

    // CONFIG_ADDRESS and each attached function's registers, in slot order.
    struct State {
        static constexpr std::uint16_t kVersion = 1;
        std::uint32_t config_address = 0;
        std::vector<PciFunction::State> functions;

        void encode(ByteWriter& out) const;
        // Refuses truncated input, another version, more than kSlots
        // functions; the caller ends the reader with finish().
        [[nodiscard]] static Result<State> decode(ByteReader& in);
    };
    [[nodiscard]] State save() const;
    // Refuses a state for another set of functions (the host is then unchanged).
    [[nodiscard]] Result<void> restore(const State& state);

private:
    // The function CONFIG_ADDRESS selects, or null when it selects nothing
    // (enable bit clear, another bus or function, an empty slot).
    [[nodiscard]] PciFunction* selected() const;

    mutable std::mutex mutex_;
    std::uint32_t config_address_ = 0;
    std::array<std::unique_ptr<PciFunction>, kSlots> slots_;
};

}  // namespace sbx

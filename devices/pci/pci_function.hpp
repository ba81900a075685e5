// One conventional PCI function with a type-0 configuration header whose
// identity is fixed and whose only resource is an optional I/O BAR at an
// address chosen by the VMM (PCI Local Bus Specification 3.0, §6.1-§6.2).
// Enough for the guest to enumerate it and bind a driver; no interrupt pin,
// no capabilities list, no expansion ROM.
#pragma once

#include <cstdint>
#include <optional>

#include "base/byte_codec.hpp"
#include "base/result.hpp"

namespace sbx {

struct PciIdentity {
    std::uint16_t vendor_id = 0;
    std::uint16_t device_id = 0;
    std::uint32_t class_code = 0;  // base class << 16 | subclass << 8 | programming interface
    std::uint8_t revision = 0;
    std::uint16_t subsystem_vendor_id = 0;
    std::uint16_t subsystem_id = 0;
};

// BAR 0 decoding I/O space: `size` ports from `port` (a power of two, at
// least 4, and `port` aligned to it; §6.2.5.1).
struct PciIoBar {
    std::uint16_t port = 0;
    std::uint16_t size = 0;
};

class PciFunction {
public:
    // A function without BARs.
    explicit PciFunction(const PciIdentity& identity) : identity_(identity) {}
    // Refuses a BAR whose size is not a power of two >= 4 or whose port is
    // not aligned to it.
    [[nodiscard]] static Result<PciFunction> create(const PciIdentity& identity, std::optional<PciIoBar> bar0);

    // `offset`: a dword-aligned register offset below 256.
    [[nodiscard]] std::uint32_t read_dword(std::uint8_t offset) const;
    // Writes the bytes of `value` that `byte_mask` selects (bit n: byte n).
    void write_dword(std::uint8_t offset, std::uint32_t value, std::uint8_t byte_mask);

    // The registers the guest can change: the command register, cache line
    // size, latency timer and interrupt line, and whether BAR 0 was just
    // written with all ones (the next read returns its size mask).
    struct State {
        static constexpr std::uint16_t kVersion = 1;
        std::uint16_t command = 0;
        std::uint8_t cache_line_size = 0, latency_timer = 0, interrupt_line = 0;
        bool bar0_sizing = false;

        void encode(ByteWriter& out) const;
        // Refuses truncated input and another version; the caller ends the
        // reader with finish().
        [[nodiscard]] static Result<State> decode(ByteReader& in);
    };
    [[nodiscard]] State save() const;
    void restore(const State& state);

private:
    PciFunction(const PciIdentity& identity, std::optional<PciIoBar> bar0) : identity_(identity), bar0_(bar0) {}

    PciIdentity identity_;
    std::optional<PciIoBar> bar0_;
    State state_;
};

}  // namespace sbx

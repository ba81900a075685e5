// Helpers shared by the device unit tests: an interrupt line that counts its
// edges, and single-byte register access through the BusDevice interface.
#pragma once

#include <cstdint>
#include <span>

#include "devices/bus.hpp"
#include "devices/interrupt.hpp"

namespace sbx::testing {

struct CountingIrq : InterruptLine {
    int count = 0;
    void trigger() override { ++count; }
};

inline std::uint8_t rd(BusDevice& d, std::uint64_t offset) {
    std::uint8_t b = 0;
    d.read(offset, std::span(&b, 1));
    return b;
}

inline void wr(BusDevice& d, std::uint64_t offset, std::uint8_t value) {
    d.write(offset, std::span<const std::uint8_t>(&value, 1));
}

}  // namespace sbx::testing

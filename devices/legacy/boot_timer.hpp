// The boot timer (Firecracker's convention): the guest's init writes the
// byte 123 to this device's MMIO address once userspace is up, and the VMM
// records the time elapsed since its own process started.
//
// It has no snapshot state: nothing here is visible to the guest (reads are
// zero), and the boot time belongs to the process that booted the guest. A
// restored VM's timer reports no boot time (its guest does not boot again);
// restore latency is the snapshot code's to measure.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "devices/bus.hpp"

namespace sbx {

class BootTimer final : public BusDevice {
public:
    static constexpr std::uint8_t kMagic = 123;
    static constexpr std::uint64_t kSize = 0x1000;
    using Clock = std::chrono::steady_clock;

    explicit BootTimer(Clock::time_point start) : start_(start) {}

    void read(std::uint64_t offset, std::span<std::uint8_t> data) override;
    void write(std::uint64_t offset, std::span<const std::uint8_t> data) override;

    // Time from start to the first magic write, if it happened.
    [[nodiscard]] std::optional<std::chrono::microseconds> boot_time() const;

private:
    Clock::time_point start_;
    std::atomic<std::int64_t> boot_us_{-1};
};

}  // namespace sbx

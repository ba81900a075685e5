#include "devices/legacy/boot_timer.hpp"

#include "base/log.hpp"

namespace sbx {

void BootTimer::read(std::uint64_t /*offset*/, std::span<std::uint8_t> data) {
    for (auto& b : data) {
        b = 0;
    }
}

void BootTimer::write(std::uint64_t offset, std::span<const std::uint8_t> data) {
    if (offset != 0 || data.empty() || data[0] != kMagic) {
        return;
    }
    auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_);
    std::int64_t unset = -1;
    if (boot_us_.compare_exchange_strong(unset, elapsed.count())) {
        log::info("guest boot time: {}.{:03} ms", elapsed.count() / 1000, elapsed.count() % 1000);
    }
}

std::optional<std::chrono::microseconds> BootTimer::boot_time() const {
    std::int64_t us = boot_us_.load();
    if (us < 0) {
        return std::nullopt;
    }
    return std::chrono::microseconds(us);
}

}  // namespace sbx

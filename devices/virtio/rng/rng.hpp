// virtio-rng, the entropy device (virtio 1.2 §5.4): one request queue whose
// chains the device fills with random bytes from the host's getrandom(2).
#pragma once

#include <array>
#include <memory>
#include <optional>

#include "base/event_fd.hpp"
#include "devices/virtio/virtio_device.hpp"

namespace sbx::virtio {

class Rng final : public VirtioDevice {
public:
    static constexpr std::uint16_t kQueueSize = 256;
    // Bytes given per chain, and per notification before the rest of the
    // queue is left to a later turn of the device thread: a guest asking for
    // gigabytes gets them in slices, never in one long stall.
    static constexpr std::size_t kMaxBytesPerChain = std::size_t{64} * 1024;
    static constexpr std::size_t kMaxBytesPerEvent = std::size_t{1024} * 1024;

    static std::unique_ptr<Rng> create();

    [[nodiscard]] DeviceType type() const override { return DeviceType::Rng; }
    [[nodiscard]] std::string name() const override { return "virtio-rng"; }
    [[nodiscard]] std::uint64_t features() const override { return 0; }
    [[nodiscard]] std::span<const std::uint16_t> queue_sizes() const override { return queue_sizes_; }
    // §5.4.4: no configuration space.
    void read_config(std::uint64_t offset, std::span<std::uint8_t> data) const override;
    [[nodiscard]] Result<void> activate(const ActiveContext& context) override;
    [[nodiscard]] Result<void> process_queue(std::size_t index) override;
    void reset() override;

    // Nothing to quiesce or carry over: each request is answered within the
    // call that pops it, from getrandom(2), so the queue positions say it
    // all (work left by kMaxBytesPerEvent is still in the available ring and
    // the restored device's first pass takes it). The state is its version
    // alone, so a later version has a place to add fields.
    void save_state(ByteWriter& out) const override { out.u16(kStateVersion); }
    [[nodiscard]] Result<void> restore_state(ByteReader& in) override;
    static constexpr std::uint16_t kStateVersion = 1;

private:
    Rng() = default;
    [[nodiscard]] Result<void> fill_requests();

    std::array<std::uint16_t, 1> queue_sizes_{kQueueSize};
    std::optional<EventFd> resume_;  // signalled when a notification's work stopped at kMaxBytesPerEvent
    ActiveContext context_;
    DescriptorChain chain_;
};

}  // namespace sbx::virtio

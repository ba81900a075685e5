// The virtio-mmio transport, version 2 registers (virtio 1.2 §4.2.2),
// around any VirtioDevice. Register accesses arrive on vCPU threads; queue
// notifications arrive as ioeventfds on the device thread (notify()); both
// take the one device lock. A driver or device error puts the device into
// DEVICE_NEEDS_RESET with one log line; only the driver's reset (status 0)
// brings it back, and nothing else in the VM is affected.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/byte_codec.hpp"
#include "base/event_loop.hpp"
#include "base/log_budget.hpp"
#include "devices/bus.hpp"
#include "devices/interrupt.hpp"
#include "devices/virtio/virtio_device.hpp"

namespace sbx::virtio {

// Register offsets (§4.2.2, Table 4.1).
namespace mmio_reg {
inline constexpr std::uint64_t kMagic = 0x000;
inline constexpr std::uint64_t kVersion = 0x004;
inline constexpr std::uint64_t kDeviceId = 0x008;
inline constexpr std::uint64_t kVendorId = 0x00c;
inline constexpr std::uint64_t kDeviceFeatures = 0x010;
inline constexpr std::uint64_t kDeviceFeaturesSel = 0x014;
inline constexpr std::uint64_t kDriverFeatures = 0x020;
inline constexpr std::uint64_t kDriverFeaturesSel = 0x024;
inline constexpr std::uint64_t kQueueSel = 0x030;
inline constexpr std::uint64_t kQueueNumMax = 0x034;
inline constexpr std::uint64_t kQueueNum = 0x038;
inline constexpr std::uint64_t kQueueReady = 0x044;
inline constexpr std::uint64_t kQueueNotify = 0x050;
inline constexpr std::uint64_t kInterruptStatus = 0x060;
inline constexpr std::uint64_t kInterruptAck = 0x064;
inline constexpr std::uint64_t kStatus = 0x070;
inline constexpr std::uint64_t kQueueDescLow = 0x080;
inline constexpr std::uint64_t kQueueDescHigh = 0x084;
inline constexpr std::uint64_t kQueueDriverLow = 0x090;
inline constexpr std::uint64_t kQueueDriverHigh = 0x094;
inline constexpr std::uint64_t kQueueDeviceLow = 0x0a0;
inline constexpr std::uint64_t kQueueDeviceHigh = 0x0a4;
inline constexpr std::uint64_t kShmSel = 0x0ac;
inline constexpr std::uint64_t kShmLenLow = 0x0b0;
inline constexpr std::uint64_t kShmLenHigh = 0x0b4;
inline constexpr std::uint64_t kShmBaseLow = 0x0b8;
inline constexpr std::uint64_t kShmBaseHigh = 0x0bc;
inline constexpr std::uint64_t kConfigGeneration = 0x0fc;
inline constexpr std::uint64_t kConfig = 0x100;
}  // namespace mmio_reg

inline constexpr std::uint32_t kMmioMagic = 0x74726976;  // "virt"
inline constexpr std::uint32_t kMmioVersion = 2;
inline constexpr std::uint32_t kMmioVendorId = 0x58425300;  // "\0SBX"
inline constexpr std::uint64_t kMmioWindow = 0x1000;
// InterruptStatus bits (§4.2.2).
inline constexpr std::uint32_t kInterruptUsedBuffer = 1;
inline constexpr std::uint32_t kInterruptConfigChange = 2;

// The registers and queues, for snapshots (MmioTransport::save_state).
struct MmioTransportState {
    std::uint32_t status = 0;
    std::uint32_t device_features_sel = 0;
    std::uint32_t driver_features_sel = 0;
    std::uint64_t driver_features = 0;
    std::uint32_t queue_sel = 0;
    std::uint32_t interrupt_status = 0;
    std::uint32_t config_generation = 0;
    std::vector<QueueState> queues;

    static constexpr std::uint16_t kVersion = 1;
    static constexpr std::uint32_t kMaxQueues = 64;
    // u16 version, the registers in declaration order, a u32 queue count
    // and each QueueState.
    void encode(ByteWriter& out) const;
    // Checks only the encoding; MmioTransport::restore_state checks values.
    [[nodiscard]] static Result<MmioTransportState> decode(ByteReader& in);
};

class MmioTransport final : public BusDevice {
public:
    // `loop` runs the device's backend handlers (and, in the VMM, the
    // queue-notify ioeventfds that call notify()).
    MmioTransport(std::unique_ptr<VirtioDevice> device, const GuestMemory& memory, InterruptLine& irq,
                  EventLoop& loop);
    ~MmioTransport() override;

    void read(std::uint64_t offset, std::span<std::uint8_t> data) override;
    void write(std::uint64_t offset, std::span<const std::uint8_t> data) override;

    // The driver notified queue `index` (from an ioeventfd, or a QueueNotify
    // write that reached the bus).
    void notify(std::size_t index);

    [[nodiscard]] std::size_t queue_count() const { return queues_.size(); }
    [[nodiscard]] std::uint32_t status() const;
    [[nodiscard]] std::uint32_t interrupt_status() const { return interrupt_status_.load(); }
    [[nodiscard]] const VirtioDevice& device() const { return *device_; }
    // VirtioDevice::stop_waiting(), without the device lock (a vCPU may
    // hold it, waiting inside a reset).
    void stop_waiting() { device_->stop_waiting(); }

    [[nodiscard]] MmioTransportState save() const;

    // Snapshots. The caller has paused the vCPUs and stopped the device
    // thread (nothing else calls into the transport meanwhile).
    //
    // Completes the device's I/O in flight and gives back chains it holds
    // (VirtioDevice::quiesce); the device stays active.
    [[nodiscard]] Result<void> quiesce();
    // After quiesce(): u16 kStateVersion, u32 device type, the
    // MmioTransportState, and the device's own state as a u32-length blob.
    [[nodiscard]] std::vector<std::uint8_t> save_state() const;
    // On a transport whose guest memory holds the snapshot's RAM, before any
    // vCPU or the device thread runs. Refuses (a clear Error, the transport
    // left reset: status 0) a state of another device type, queue count or
    // queue maximum, a status or queue configuration no driver could have
    // produced, ring addresses outside memory, features not offered, and a
    // device state the device refuses. A transport saved while active is
    // re-activated on its restored queues (their positions kept), then the
    // device's after_restore() runs and every active queue is processed as
    // if notified; an error from those comes from the guest's rings and
    // puts the device into NEEDS_RESET as it would have live. A pending
    // interrupt status raises the line once more.
    [[nodiscard]] Result<void> restore_state(std::span<const std::uint8_t> bytes);

    static constexpr std::uint16_t kStateVersion = 1;
    static constexpr std::size_t kMaxDeviceStateBytes = std::size_t{1} << 20;

private:
    class Interrupt;
    class Events;

    [[nodiscard]] std::uint32_t read_register(std::uint64_t offset) const;
    void write_register(std::uint64_t offset, std::uint32_t value);
    void write_status(std::uint32_t value);
    void activate();
    void reset_device();
    [[nodiscard]] MmioTransportState save_locked() const;
    [[nodiscard]] Result<void> restore_locked(std::span<const std::uint8_t> bytes);
    void resume_restored();
    // Puts the device into DEVICE_NEEDS_RESET (§2.1.2) with one log line.
    void fail(const Error& error);
    [[nodiscard]] Queue* selected_queue();
    [[nodiscard]] std::uint64_t offered_features() const;
    [[nodiscard]] bool running() const { return activated_ && (status_ & kStatusNeedsReset) == 0; }
    // What the guest did wrong, within log_budget_: a driver that repeats
    // a mistake forever fills no disk with the VMM's log.
    void warn_guest(const std::string& what);

    std::unique_ptr<VirtioDevice> device_;
    const GuestMemory& memory_;
    InterruptLine& irq_;
    EventLoop& loop_;
    std::unique_ptr<Interrupt> interrupt_;
    std::unique_ptr<Events> events_;

    mutable std::mutex mutex_;
    LogBudget log_budget_;  // under mutex_
    std::vector<Queue> queues_;
    std::uint32_t status_ = 0;
    std::uint32_t device_features_sel_ = 0;
    std::uint32_t driver_features_sel_ = 0;
    std::uint64_t driver_features_ = 0;
    std::uint32_t queue_sel_ = 0;
    std::uint32_t config_generation_ = 0;
    bool activated_ = false;
    std::uint64_t generation_ = 0;  // bumped at each reset: stale handlers do nothing
    std::atomic<std::uint32_t> interrupt_status_{0};
};

}  // namespace sbx::virtio

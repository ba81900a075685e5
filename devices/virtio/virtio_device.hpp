// The transport-agnostic side of a virtio device (virtio 1.2 §2, §3): what
// a device offers (type, features, queues, configuration space) and what it
// does once the driver has set DRIVER_OK. The transport (mmio/) owns the
// register layout, feature negotiation, the queues' configuration and the
// device lock; a device never sees a register.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "base/byte_codec.hpp"
#include "base/result.hpp"
#include "devices/virtio/queue/queue.hpp"

namespace sbx::virtio {

// Device IDs (§5).
enum class DeviceType : std::uint32_t { Net = 1, Block = 2, Rng = 4, Vsock = 19 };

// Reserved feature bits (§6).
inline constexpr std::uint64_t kFeatureIndirectDesc = 1ULL << 28;  // VIRTIO_F_INDIRECT_DESC
inline constexpr std::uint64_t kFeatureEventIdx = 1ULL << 29;      // VIRTIO_F_EVENT_IDX
inline constexpr std::uint64_t kFeatureVersion1 = 1ULL << 32;      // VIRTIO_F_VERSION_1

// Device status bits (§2.1).
inline constexpr std::uint32_t kStatusAcknowledge = 1;
inline constexpr std::uint32_t kStatusDriver = 2;
inline constexpr std::uint32_t kStatusDriverOk = 4;
inline constexpr std::uint32_t kStatusFeaturesOk = 8;
inline constexpr std::uint32_t kStatusNeedsReset = 0x40;
inline constexpr std::uint32_t kStatusFailed = 0x80;

// Used-buffer and configuration-change notifications to the driver
// (§2.3, §2.7.7); the transport sets its interrupt status and raises the line.
class DeviceInterrupt {
public:
    virtual ~DeviceInterrupt() = default;
    virtual void signal_used() = 0;
    virtual void signal_config() = 0;
};

// Host fds a device watches while it is active (a tap, an io_uring, a
// socket). Handlers run on the device thread with the device lock held and
// only while the device is active; an error from one puts the device into
// NEEDS_RESET. Everything registered is removed when the device resets.
class DeviceEvents {
public:
    using Handler = std::function<Result<void>(std::uint32_t events)>;
    virtual ~DeviceEvents() = default;
    [[nodiscard]] virtual Result<void> add(int fd, std::uint32_t events, Handler handler) = 0;
    [[nodiscard]] virtual Result<void> modify(int fd, std::uint32_t events) = 0;
    virtual void remove(int fd) = 0;
};

// Everything a device may use from activation until reset.
struct ActiveContext {
    const GuestMemory* memory = nullptr;
    std::span<Queue> queues;         // checked and active where the driver set them ready
    std::uint64_t features = 0;      // what the driver accepted
    DeviceInterrupt* interrupt = nullptr;
    DeviceEvents* events = nullptr;
};

class VirtioDevice {
public:
    virtual ~VirtioDevice() = default;

    [[nodiscard]] virtual DeviceType type() const = 0;
    // For log lines, e.g. "virtio-blk vda".
    [[nodiscard]] virtual std::string name() const = 0;
    // Device-specific feature bits; the transport adds VERSION_1,
    // EVENT_IDX and INDIRECT_DESC, which every device here supports.
    [[nodiscard]] virtual std::uint64_t features() const = 0;
    // The maximum size of each queue, in queue-index order.
    [[nodiscard]] virtual std::span<const std::uint16_t> queue_sizes() const = 0;

    // Device configuration space (§4.2.2 offset 0x100 on); reads past its
    // end return zeros, writes to read-only fields are ignored.
    virtual void read_config(std::uint64_t offset, std::span<std::uint8_t> data) const = 0;
    virtual void write_config(std::uint64_t /*offset*/, std::span<const std::uint8_t> /*data*/) {}

    // The driver set DRIVER_OK. An error leaves the device in NEEDS_RESET.
    [[nodiscard]] virtual Result<void> activate(const ActiveContext& context) = 0;
    // The driver notified queue `index` (§2.7.13.3). An error (a hostile
    // chain, say) puts the device into NEEDS_RESET.
    [[nodiscard]] virtual Result<void> process_queue(std::size_t index) = 0;
    // Back to the state before activation (§2.4): stop using guest memory,
    // drop backend registrations, keep the backend itself (disk, tap).
    virtual void reset() = 0;
    // Any thread, without the device lock, once the VM stops for good: a
    // wait for the backend inside reset() (on a vCPU thread) ends within a
    // short slice, leaving what is still running to the backend's teardown.
    virtual void stop_waiting() {}

    // Snapshots (the transport calls these with the device lock held, the
    // vCPUs paused and the device thread stopped).
    //
    // quiesce(), on an active device: completes backend I/O in flight into
    // guest memory (returning those chains to the used ring) and gives back
    // chains popped but not used, so that the queues' positions alone
    // describe the rings. The device stays active and may go on afterwards
    // (a VM that is snapshotted and resumed).
    [[nodiscard]] virtual Result<void> quiesce() { return ok(); }
    // Device state beyond the queues, including identity fields the restore
    // checks against the new backend (a disk's capacity, say).
    virtual void save_state(ByteWriter& /*out*/) const {}
    // On a device that was never activated, before activate(): checks the
    // saved state (untrusted) against this device and keeps what it needs.
    // The reader must be consumed exactly; an error refuses the restore.
    [[nodiscard]] virtual Result<void> restore_state(ByteReader& /*in*/) { return ok(); }
    // After a restore that re-activated the device on its restored queues.
    // Every queue is then processed as if notified (a notification may have
    // been lost with the old VM's ioeventfds) by the transport.
    [[nodiscard]] virtual Result<void> after_restore() { return ok(); }
};

// Copies the part of `config` that [offset, offset + out.size()) covers
// into `out`; bytes beyond the end read as zero.
void read_config_bytes(std::span<const std::uint8_t> config, std::uint64_t offset, std::span<std::uint8_t> out);

}  // namespace sbx::virtio

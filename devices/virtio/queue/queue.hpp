// A split virtqueue (virtio 1.2 §2.7), the device side: the ring addresses
// the driver configured, the device's position in the available ring, and
// the used ring it fills. Every value read from guest memory is checked
// before use; any violation is an Error, which the transport turns into
// DEVICE_NEEDS_RESET (§2.1.2) for the owning device.
#pragma once

#include <cstdint>

#include "base/byte_codec.hpp"
#include "devices/virtio/queue/descriptor_chain.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::virtio {

// Plain data for save/restore; restored values are validated like a
// driver's writes.
struct QueueState {
    std::uint16_t max_size = 0;
    std::uint16_t size = 0;
    bool ready = false;
    std::uint64_t desc_table = 0;
    std::uint64_t avail_ring = 0;
    std::uint64_t used_ring = 0;
    std::uint16_t next_avail = 0;
    std::uint16_t next_used = 0;
    std::uint16_t signalled_used = 0;
    bool signalled_valid = false;
    bool event_idx = false;
    bool indirect_allowed = false;
    bool active = false;

    static constexpr std::uint16_t kVersion = 1;
    // u16 version, then the fields in declaration order.
    void encode(ByteWriter& out) const;
    // Checks only the encoding; the values are checked by Queue::restore.
    [[nodiscard]] static Result<QueueState> decode(ByteReader& in);
};

class Queue {
public:
    explicit Queue(std::uint16_t max_size);

    // Driver-visible configuration (virtio-mmio QueueNum/QueueDesc*/...).
    [[nodiscard]] std::uint16_t max_size() const { return max_size_; }
    [[nodiscard]] std::uint16_t size() const { return size_; }
    [[nodiscard]] bool ready() const { return ready_; }
    void set_size(std::uint16_t size) { size_ = size; }
    void set_ready(bool ready) { ready_ = ready; }
    void set_desc_table(std::uint64_t addr) { desc_table_ = addr; }
    void set_avail_ring(std::uint64_t addr) { avail_ring_ = addr; }
    void set_used_ring(std::uint64_t addr) { used_ring_ = addr; }
    [[nodiscard]] std::uint64_t desc_table() const { return desc_table_; }
    [[nodiscard]] std::uint64_t avail_ring() const { return avail_ring_; }
    [[nodiscard]] std::uint64_t used_ring() const { return used_ring_; }

    // Checks the configuration against guest memory (size a power of two
    // no larger than max_size, rings aligned per §2.7 and inside RAM) and
    // caches the ring locations. Called once the driver sets DRIVER_OK.
    [[nodiscard]] Result<void> activate(const GuestMemory& memory, bool event_idx);
    // VIRTIO_F_INDIRECT_DESC negotiated: chains may use indirect tables.
    void set_indirect_allowed(bool allowed);
    [[nodiscard]] bool active() const { return active_; }
    // Back to the state after construction (device reset, §2.4).
    void reset();

    // The next available chain, parsed and checked, into `chain` (whose
    // storage is reused: no allocation once warm). False when the driver
    // has made nothing new available.
    [[nodiscard]] Result<bool> pop(DescriptorChain& chain);
    // Gives the last popped chain back (the device could not use it yet).
    void undo_pop() { --next_avail_; }
    // True when the driver has made buffers available that were not popped.
    [[nodiscard]] Result<bool> has_available() const;

    // Returns a chain to the driver with `written` bytes written into it.
    [[nodiscard]] Result<void> add_used(std::uint16_t head, std::uint32_t written);

    // Whether the driver wants an interrupt for the used buffers added since
    // the last call that returned true (§2.7.7.2: used_event with EVENT_IDX,
    // else the avail ring's NO_INTERRUPT flag).
    [[nodiscard]] bool needs_notification();

    // Notification suppression (§2.7.7.1, §2.7.10): call disable before
    // draining the ring and enable after it; enable returns true when the
    // driver added buffers in between, which must then be processed too.
    void disable_notification();
    [[nodiscard]] Result<bool> enable_notification();
    // The usual drain step: pop with notifications off; on an empty ring,
    // turn them back on and look once more (a driver may have added a
    // buffer meanwhile). False: empty, and the driver will notify.
    [[nodiscard]] Result<bool> pop_or_enable_notification(DescriptorChain& chain);

    [[nodiscard]] QueueState save() const;
    // Checks the state as untrusted input: against memory when it says the
    // queue was active (as activate() does), positions that no device could
    // have reached (more chains outstanding than the queue holds, positions
    // on a queue never activated). On error the queue is left reset.
    [[nodiscard]] Result<void> restore(const GuestMemory& memory, const QueueState& state);

    // The avail ring's idx as the driver last published it (§2.7.6): it
    // moves each time the driver makes a buffer available.
    [[nodiscard]] std::uint16_t avail_idx() const;

private:
    [[nodiscard]] std::uint16_t avail_flags() const;
    [[nodiscard]] std::uint16_t used_event() const;

    std::uint16_t max_size_;
    std::uint16_t size_;
    bool ready_ = false;
    std::uint64_t desc_table_ = 0;
    std::uint64_t avail_ring_ = 0;
    std::uint64_t used_ring_ = 0;

    bool active_ = false;
    bool event_idx_ = false;
    const GuestMemory* memory_ = nullptr;
    std::uint8_t* avail_ = nullptr;  // host views of the rings, checked at activation
    std::uint8_t* used_ = nullptr;
    bool indirect_allowed_ = false;
    std::uint16_t next_avail_ = 0;
    std::uint16_t next_used_ = 0;
    std::uint16_t signalled_used_ = 0;
    bool signalled_valid_ = false;  // false until the first notification decision
};

}  // namespace sbx::virtio

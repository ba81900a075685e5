// A guest driver for unit tests: lays out a split virtqueue in guest
// memory the way Linux's virtio_ring does, offers chains of buffers, reads
// back what the device returned, and can write any raw descriptor so tests
// can play a hostile guest.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "devices/virtio/queue/queue.hpp"

namespace sbx::virtio::testing {

struct UsedElem {
    std::uint16_t head;
    std::uint32_t len;
};

// The guest addresses of one offered chain's device-writable buffers.
struct OfferedChain {
    std::uint16_t head = 0;
    std::vector<std::pair<GuestAddress, std::uint32_t>> writable;
};

class MockDriver {
public:
    // Rings at `base` (desc table, avail ring, used ring, page-aligned),
    // buffers from base + 64 KiB on. Needs ~1 MiB of RAM from base.
    MockDriver(const GuestMemory& memory, GuestAddress base, std::uint16_t size);

    // Writes size and ring addresses into the queue and marks it ready.
    void configure(Queue& queue) const;

    // Copies `readable` buffers into guest memory, reserves `writable`
    // buffers of the given lengths, chains them (through an indirect table
    // when asked) and makes the chain available.
    OfferedChain offer(std::span<const std::vector<std::uint8_t>> readable,
                       std::span<const std::uint32_t> writable, bool indirect = false);
    // Raw access for hostile tests.
    void write_descriptor(std::uint16_t index, const RawDescriptor& desc) const;
    void write_descriptor_at(GuestAddress table, std::uint16_t index, const RawDescriptor& desc) const;
    void publish(std::uint16_t head);             // avail.ring[idx % size] = head; ++idx
    void set_avail_idx(std::uint16_t idx) const;  // without a ring entry
    void set_avail_flags(std::uint16_t flags) const;
    void set_used_event(std::uint16_t value) const;
    [[nodiscard]] std::uint16_t avail_event() const;
    [[nodiscard]] std::uint16_t used_flags() const;
    // Reserves `len` bytes of buffer space; returns its address.
    GuestAddress allocate(std::uint32_t len);

    // The next used element the device returned, if any.
    std::optional<UsedElem> take_used();
    [[nodiscard]] std::vector<std::uint8_t> read(GuestAddress addr, std::uint32_t len) const;

    [[nodiscard]] GuestAddress desc_table() const { return desc_; }
    [[nodiscard]] std::uint16_t size() const { return size_; }

private:
    const GuestMemory& memory_;
    std::uint16_t size_;
    GuestAddress desc_, avail_, used_;
    GuestAddress next_buffer_;
    std::uint16_t next_desc_ = 0;   // free descriptors are handed out round-robin
    std::uint16_t avail_idx_ = 0;
    std::uint16_t last_used_ = 0;
};

}  // namespace sbx::virtio::testing

// Descriptor chains of a split virtqueue (virtio 1.2 §2.7.5), parsed in
// full and checked before a device sees any of it: every index inside the
// table, every buffer inside guest RAM, no loops, no nested indirect
// tables, device-writable buffers only after device-readable ones, and a
// cap on the number of descriptors. A parsed chain is a list of host views
// (segments) into guest memory, read and written through ChainReader and
// ChainWriter (chain_io.hpp), so devices never touch raw descriptors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::virtio {

// struct virtq_desc (§2.7.5).
struct RawDescriptor {
    std::uint64_t addr;
    std::uint32_t len;
    std::uint16_t flags;
    std::uint16_t next;
};
static_assert(sizeof(RawDescriptor) == 16);

inline constexpr std::uint16_t kDescFlagNext = 1;
inline constexpr std::uint16_t kDescFlagWrite = 2;
inline constexpr std::uint16_t kDescFlagIndirect = 4;

// More descriptors than this in one chain (direct and indirect together)
// is refused, whatever the queue size: Linux never needs more than a few
// hundred, and it bounds the work one notification can cause.
inline constexpr std::size_t kMaxChainDescriptors = 1024;

// The queue's descriptor table as the device sees it.
struct DescriptorTable {
    const GuestMemory* memory = nullptr;
    GuestAddress address;
    std::uint16_t size = 0;          // entries (the queue size)
    bool indirect_allowed = false;   // VIRTIO_F_INDIRECT_DESC negotiated
};

// One buffer of a chain: a host view of guest memory.
struct Segment {
    GuestAddress address;
    std::span<std::uint8_t> bytes;
};

class DescriptorChain {
public:
    // Parses the chain starting at `head`, replacing this chain's contents
    // (its storage is reused). On error the chain is left empty.
    [[nodiscard]] Result<void> parse(const DescriptorTable& table, std::uint16_t head);

    [[nodiscard]] std::uint16_t head() const { return head_; }
    [[nodiscard]] std::span<const Segment> readable() const {
        return std::span(segments_).first(first_writable_);
    }
    [[nodiscard]] std::span<const Segment> writable() const {
        return std::span(segments_).subspan(first_writable_);
    }
    [[nodiscard]] std::uint64_t readable_bytes() const { return readable_bytes_; }
    [[nodiscard]] std::uint64_t writable_bytes() const { return writable_bytes_; }

private:
    [[nodiscard]] Result<void> add(const RawDescriptor& desc, const GuestMemory& memory);
    void clear();

    std::vector<Segment> segments_;
    std::size_t first_writable_ = 0;
    std::uint64_t readable_bytes_ = 0;
    std::uint64_t writable_bytes_ = 0;
    std::size_t descriptors_ = 0;
    std::uint16_t head_ = 0;
};

}  // namespace sbx::virtio

// libFuzzer target: a guest that controls every byte of a small guest
// memory (rings, descriptor tables, indirect tables, buffers) and the queue
// configuration. The device side pops chains, reads and writes them whole
// and returns them; nothing may crash, hang or touch memory outside the
// guest's, and every parsed chain must stay inside guest RAM.
#include <cstdint>
#include <cstring>
#include <vector>

#include "devices/virtio/queue/chain_io.hpp"
#include "devices/virtio/queue/queue.hpp"

namespace {

constexpr std::uint64_t kMemorySize = 256 * 1024;

sbx::GuestMemory& memory() {
    static sbx::GuestMemory mem = [] {
        sbx::MemoryRegionSpec spec{sbx::GuestAddress(0), kMemorySize};
        return sbx::GuestMemory::create(std::span(&spec, 1)).value();
    }();
    return mem;
}

bool inside_guest(const sbx::virtio::Segment& s) {
    const auto& region = memory().regions().front();
    auto* base = static_cast<std::uint8_t*>(region.mapping.data());
    return s.bytes.data() >= base && s.bytes.data() + s.bytes.size() <= base + region.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace sbx::virtio;
    if (size < 16) {
        return 0;
    }
    // Header: queue size, ring addresses (within the first 64 KiB), flags.
    std::uint16_t queue_size = 0;
    std::uint16_t desc = 0, avail = 0, used = 0;
    std::memcpy(&queue_size, data, 2);
    std::memcpy(&desc, data + 2, 2);
    std::memcpy(&avail, data + 4, 2);
    std::memcpy(&used, data + 6, 2);
    const std::uint8_t flags = data[8];
    data += 16;
    size -= 16;

    auto& mem = memory();
    if (!mem.fill(sbx::GuestAddress(0), kMemorySize, 0)) {
        return 0;
    }
    if (!mem.write(sbx::GuestAddress(0), std::span(data, std::min<std::size_t>(size, kMemorySize)))) {
        return 0;
    }

    Queue queue(256);
    queue.set_size(queue_size);
    queue.set_desc_table(desc);
    queue.set_avail_ring(avail);
    queue.set_used_ring(used);
    queue.set_indirect_allowed((flags & 1) != 0);
    if (!queue.activate(mem, (flags & 2) != 0)) {
        return 0;
    }
    DescriptorChain chain;
    std::vector<std::uint8_t> scratch;
    // At most one ring's worth of chains per input.
    for (int i = 0; i < 256; ++i) {
        auto popped = queue.pop(chain);
        if (!popped || !*popped) {
            break;
        }
        for (const auto& s : chain.readable()) {
            if (!inside_guest(s)) {
                __builtin_trap();
            }
        }
        for (const auto& s : chain.writable()) {
            if (!inside_guest(s)) {
                __builtin_trap();
            }
        }
        ChainReader reader(chain);
        scratch.resize(reader.remaining());
        if (reader.read(scratch) != scratch.size() || reader.remaining() != 0) {
            __builtin_trap();
        }
        ChainWriter writer(chain);
        const std::uint64_t room = writer.available();
        scratch.assign(room, 0xa5);
        if (writer.write(scratch) != room || writer.written() != room) {
            __builtin_trap();
        }
        if (!queue.add_used(chain.head(), writer.written())) {
            break;
        }
        [[maybe_unused]] bool notify = queue.needs_notification();
    }
    [[maybe_unused]] auto more = queue.enable_notification();
    return 0;
}

// For the virtio fuzz targets: the input read as a stream of fields, a
// real MmioTransport around a real device over guest RAM from vmm/memory
// (with an event loop and an interrupt line that counts), and the
// driver's side of split virtqueues (virtio 1.2 §2.7) at fixed places:
// chains it builds as Linux does or from raw descriptors of the input's,
// and what it made available and got back, to check the used rings by.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "base/event_loop.hpp"
#include "devices/device_test_util.hpp"
#include "devices/virtio/mmio/mmio_transport.hpp"
#include "fuzz/fuzz_util.hpp"

namespace sbx::fuzz {

// The fuzz input front to back; zeros once it runs out.
class Input {
public:
    Input(const std::uint8_t* data, std::size_t size) : rest_(data, size) {}
    template <typename T>
    T take() {
        T value{};
        const std::size_t n = std::min(sizeof value, rest_.size());
        std::memcpy(&value, rest_.data(), n);
        rest_ = rest_.subspan(n);
        return value;
    }
    std::span<const std::uint8_t> bytes(std::size_t n) {
        auto out = rest_.first(std::min(n, rest_.size()));
        rest_ = rest_.subspan(out.size());
        return out;
    }
    [[nodiscard]] bool empty() const { return rest_.empty(); }

private:
    std::span<const std::uint8_t> rest_;
};

struct Used {
    std::uint16_t head = 0;
    std::uint32_t len = 0;
};

// The driver's side of one split virtqueue: descriptor table at `base`,
// available ring after it, used ring on the next page (§2.7: alignments
// 16, 2 and 4). Needs 16 KiB from `base` for 256 entries.
class Ring {
public:
    Ring(const GuestMemory& memory, std::uint64_t base, std::uint16_t size)
        : memory_(memory),
          size_(size),
          desc_(base),
          avail_(base + 16ULL * size),
          used_((avail_ + 6 + 2ULL * size + 4095) / 4096 * 4096) {}

    [[nodiscard]] std::uint64_t desc() const { return desc_; }
    [[nodiscard]] std::uint64_t avail() const { return avail_; }
    [[nodiscard]] std::uint64_t used() const { return used_; }

    void descriptor(std::uint16_t index, const virtio::RawDescriptor& d) const {
        (void)memory_.write_obj(GuestAddress(desc_ + 16ULL * (index % size_)), d);
    }
    // §2.7.13: the ring entry, then idx.
    void publish(std::uint16_t head) {
        (void)memory_.write_obj(GuestAddress(avail_ + 4 + 2ULL * (avail_idx_ % size_)), head);
        ++avail_idx_;
        (void)memory_.write_obj(GuestAddress(avail_ + 2), avail_idx_);
    }
    // The next used element (§2.7.8), if the device returned one.
    std::optional<Used> take_used() {
        const auto idx = memory_.read_obj<std::uint16_t>(GuestAddress(used_ + 2)).value();
        if (idx == last_used_) {
            return std::nullopt;
        }
        const std::uint64_t elem = used_ + 4 + 8ULL * (last_used_++ % size_);
        return Used{static_cast<std::uint16_t>(memory_.read_obj<std::uint32_t>(GuestAddress(elem)).value()),
                    memory_.read_obj<std::uint32_t>(GuestAddress(elem + 4)).value()};
    }

private:
    const GuestMemory& memory_;
    std::uint16_t size_;
    std::uint64_t desc_, avail_, used_;
    std::uint16_t avail_idx_ = 0;
    std::uint16_t last_used_ = 0;
};

// A chain the driver built itself: its buffers, in order.
struct Chain {
    std::vector<std::pair<std::uint64_t, std::uint32_t>> buffers;
};

// Buffer space the driver hands out round robin from [begin, end).
class BufferArea {
public:
    BufferArea(std::uint64_t begin, std::uint64_t end) : begin_(begin), end_(end), next_(begin) {}
    // `len` bytes, 16-aligned; `wrapped` when space handed out before is
    // handed out again (a chain the device holds may still own it).
    std::uint64_t take(std::uint32_t len, bool& wrapped) {
        wrapped = next_ + len > end_;
        next_ = wrapped ? begin_ : next_;
        const std::uint64_t at = next_;
        next_ += (std::uint64_t{len} + 15) / 16 * 16;
        return at;
    }

private:
    std::uint64_t begin_, end_, next_;
};

// A descriptor of the input's (§2.7.5): any length, either direction,
// NEXT to any index; its buffer at or past `floor` (so it cannot land on
// the rings), or anywhere, inside guest RAM or not.
inline virtio::RawDescriptor raw_descriptor(Input& in, std::uint64_t floor) {
    const auto flags = in.take<std::uint8_t>();
    std::uint64_t addr = (flags & 0x80) != 0 ? in.take<std::uint64_t>() : floor + in.take<std::uint16_t>();
    addr = addr < floor ? addr + floor : addr;
    const std::uint32_t len = (flags & 0x40) != 0 ? in.take<std::uint32_t>() : in.take<std::uint16_t>() % 2048U;
    return {addr, len, static_cast<std::uint16_t>(flags & (virtio::kDescFlagNext | virtio::kDescFlagWrite)),
            in.take<std::uint8_t>()};
}

// The driver's view of one queue: what it made available and has not got
// back, and which of those chains it built itself; `clean` while no raw
// descriptor and no reuse of a held chain's descriptors can make two
// chains share buffers.
struct DriverQueue {
    std::optional<Ring> ring;
    std::uint16_t size = 1;
    std::uint16_t cursor = 0;
    std::vector<std::uint16_t> outstanding;    // by head
    std::vector<std::optional<Chain>> honest;  // by head
    std::vector<int> owner;                    // descriptor -> honest head, or -1
    bool clean = true;
    // More made available than the queue holds (heads made available
    // again): the device may then return more than the used ring holds
    // before the driver looks, so the returns are no longer followed.
    bool overcommitted = false;
    std::size_t in_flight = 0;

    // Fresh rings at `base` (16 KiB), as a driver lays them out (§2.7).
    void setup(const GuestMemory& memory, std::uint64_t base, std::uint16_t queue_size) {
        (void)memory.fill(GuestAddress(base), 16 * 1024, 0);
        size = std::clamp<std::uint16_t>(queue_size, 1, 256);
        ring.emplace(memory, base, size);
        cursor = 0;
        outstanding.assign(size, 0);
        honest.assign(size, std::nullopt);
        owner.assign(size, -1);
        clean = true;
        overcommitted = false;
        in_flight = 0;
    }
    void write(std::uint16_t index, const virtio::RawDescriptor& d) {
        index %= size;
        if (owner[index] >= 0) {
            clean = clean && outstanding[owner[index]] == 0;
            honest[owner[index]].reset();
            owner[index] = -1;
        }
        ring->descriptor(index, d);
    }
    void publish(std::uint16_t head) {
        head %= size;
        overcommitted = overcommitted || ++in_flight > size;
        clean = clean && !overcommitted && outstanding[head] == 0;
        ++outstanding[head];
        ring->publish(head);
    }
    // A chain as Linux builds it, on the next free descriptors.
    void publish_chain(Chain chain, bool device_writable) {
        const std::uint16_t head = cursor % size;
        clean = clean && chain.buffers.size() <= size;  // longer, it would overwrite itself
        for (std::size_t i = 0; i < chain.buffers.size(); ++i) {
            const bool last = i + 1 == chain.buffers.size();
            const auto index = static_cast<std::uint16_t>((head + i) % size);
            const auto flags = static_cast<std::uint16_t>((device_writable ? virtio::kDescFlagWrite : 0) |
                                                          (last ? 0 : virtio::kDescFlagNext));
            write(index, {chain.buffers[i].first, chain.buffers[i].second, flags,
                          static_cast<std::uint16_t>(last ? 0 : (head + i + 1) % size)});
            owner[index] = head;
        }
        cursor = static_cast<std::uint16_t>(head + chain.buffers.size());
        honest[head] = std::move(chain);
        publish(head);
    }
    // One to four raw descriptors from a head of the input's, made available.
    void publish_raw(Input& in, std::uint64_t floor) {
        const auto head = in.take<std::uint8_t>();
        for (int i = 0, n = 1 + in.take<std::uint8_t>() % 4; i < n; ++i) {
            write(static_cast<std::uint16_t>(head + i), raw_descriptor(in, floor));
        }
        clean = false;
        publish(head);
    }
    // §2.7.8: a used head is one made available and not yet returned.
    // Returns the chain the driver built, while the queue is clean.
    const Chain* take(const Used& used) {
        if (overcommitted) {
            return nullptr;
        }
        check(used.head < size && outstanding[used.head] > 0);
        --outstanding[used.head];
        --in_flight;
        return clean && honest[used.head] ? &*honest[used.head] : nullptr;
    }
};

// The first `len` bytes of a chain's buffers; fewer when it holds fewer.
inline std::vector<std::uint8_t> contents(const GuestMemory& memory, const Chain& chain, std::uint32_t len) {
    std::vector<std::uint8_t> out;
    for (const auto& [at, size] : chain.buffers) {
        const std::uint32_t n = std::min(size, len - static_cast<std::uint32_t>(out.size()));
        out.resize(out.size() + n);
        (void)memory.read(GuestAddress(at), std::span(out).last(n));
    }
    return out;
}

// Guest RAM for the whole run, zeroed for each input: mapping it anew per
// input costs more than most inputs. One size per target.
inline const GuestMemory& fresh_memory(std::uint64_t size) {
    static const GuestMemory memory = [size] {
        MemoryRegionSpec spec{GuestAddress(0), size};
        return GuestMemory::create(std::span(&spec, 1)).value();
    }();
    check(memory.total_size() == size && memory.fill(GuestAddress(0), size, 0).has_value());
    return memory;
}

// A device behind a fresh transport, as a VMM builds it.
struct Bed {
    const GuestMemory& memory;
    std::unique_ptr<EventLoop> loop = EventLoop::create().value();
    testing::CountingIrq irq;
    std::unique_ptr<virtio::MmioTransport> transport;

    Bed(std::uint64_t memory_size, std::unique_ptr<virtio::VirtioDevice> device)
        : memory(fresh_memory(memory_size)),
          transport(std::make_unique<virtio::MmioTransport>(std::move(device), memory, irq, *loop)) {}

    [[nodiscard]] std::uint32_t reg(std::uint64_t offset) const {
        std::uint32_t v = 0;
        transport->read(offset, std::span(reinterpret_cast<std::uint8_t*>(&v), 4));
        return v;
    }
    void set_reg(std::uint64_t offset, std::uint32_t value) const {
        transport->write(offset, std::span(reinterpret_cast<const std::uint8_t*>(&value), 4));
    }
    // §3.1.1 steps 1-6; whether the device took FEATURES_OK.
    bool negotiate(std::uint64_t features) const {
        using namespace virtio;
        const std::pair<std::uint64_t, std::uint32_t> writes[] = {
            {mmio_reg::kStatus, 0},  // reset
            {mmio_reg::kStatus, kStatusAcknowledge | kStatusDriver},
            {mmio_reg::kDriverFeaturesSel, 0},
            {mmio_reg::kDriverFeatures, static_cast<std::uint32_t>(features)},
            {mmio_reg::kDriverFeaturesSel, 1},
            {mmio_reg::kDriverFeatures, static_cast<std::uint32_t>(features >> 32)},
            {mmio_reg::kStatus, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk},
        };
        for (const auto& [offset, value] : writes) {
            set_reg(offset, value);
        }
        return (reg(mmio_reg::kStatus) & kStatusFeaturesOk) != 0;
    }
    // §4.2.3.2: queue `index` of `size` entries on `ring`'s addresses, ready.
    void setup_queue(std::uint32_t index, std::uint32_t size, const Ring& ring) const {
        using namespace virtio::mmio_reg;
        set_reg(kQueueSel, index);
        set_reg(kQueueNum, size);
        set_reg(kQueueDescLow, static_cast<std::uint32_t>(ring.desc()));
        set_reg(kQueueDriverLow, static_cast<std::uint32_t>(ring.avail()));
        set_reg(kQueueDeviceLow, static_cast<std::uint32_t>(ring.used()));
        set_reg(kQueueReady, 1);
    }
    void driver_ok() const {
        set_reg(virtio::mmio_reg::kStatus, reg(virtio::mmio_reg::kStatus) | virtio::kStatusDriverOk);
    }
    [[nodiscard]] bool needs_reset() const {
        return (reg(virtio::mmio_reg::kStatus) & virtio::kStatusNeedsReset) != 0;
    }
    // The device thread's ready handlers, without waiting.
    void pump() const { (void)loop->run_once(0); }
};

// §4.2.3.2 for each queue: a size of the input's (mostly a power of two),
// fresh rings at its base, ready. Then DRIVER_OK.
inline void start_queues(const Bed& bed, std::span<DriverQueue> queues, std::span<const std::uint64_t> bases,
                         Input& in) {
    for (std::size_t i = 0; i < queues.size(); ++i) {
        const auto shift = in.take<std::uint8_t>();
        const std::uint32_t n = (shift & 0x80) != 0 ? shift : 1U << (shift % 9);
        queues[i].setup(bed.memory, bases[i], static_cast<std::uint16_t>(n));
        bed.setup_queue(static_cast<std::uint32_t>(i), n, *queues[i].ring);
    }
    bed.driver_ok();
}

}  // namespace sbx::fuzz

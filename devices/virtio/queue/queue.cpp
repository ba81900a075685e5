#include "devices/virtio/queue/queue.hpp"

#include <atomic>
#include <bit>
#include <cstring>

namespace sbx::virtio {
namespace {

// Split ring layout (§2.7.6, §2.7.8): avail = flags, idx, ring[size],
// used_event; used = flags, idx, ring[size] of {id, len}, avail_event.
constexpr std::uint64_t kRingHeader = 4;
constexpr std::uint64_t kUsedElemSize = 8;
constexpr std::uint16_t kAvailFlagNoInterrupt = 1;  // VIRTQ_AVAIL_F_NO_INTERRUPT
constexpr std::uint16_t kUsedFlagNoNotify = 1;      // VIRTQ_USED_F_NO_NOTIFY

std::uint64_t avail_ring_bytes(std::uint16_t size) { return kRingHeader + 2ULL * size + 2; }
std::uint64_t used_ring_bytes(std::uint16_t size) { return kRingHeader + kUsedElemSize * size + 2; }

// Ring fields are shared with the driver running on other CPUs: accessed
// atomically, with acquire/release ordering where §2.7.13 asks for barriers.
std::uint16_t load16(const std::uint8_t* p, std::memory_order order = std::memory_order_relaxed) {
    return std::atomic_ref(*reinterpret_cast<std::uint16_t*>(const_cast<std::uint8_t*>(p))).load(order);
}
void store16(std::uint8_t* p, std::uint16_t v, std::memory_order order = std::memory_order_relaxed) {
    std::atomic_ref(*reinterpret_cast<std::uint16_t*>(p)).store(v, order);
}

Result<std::uint8_t*> ring_view(const GuestMemory& memory, std::uint64_t addr, std::uint64_t len,
                                std::uint64_t align, const char* what) {
    if (addr % align != 0) {
        return make_error("{} {:#x} is not {}-byte aligned", what, addr, align);
    }
    auto view = memory.slice(GuestAddress(addr), len);
    if (!view) {
        return make_error("{} {:#x}+{:#x} is outside guest memory", what, addr, len);
    }
    return view->data();
}

}  // namespace

Queue::Queue(std::uint16_t max_size) : max_size_(max_size), size_(max_size) {}

Result<void> Queue::activate(const GuestMemory& memory, bool event_idx) {
    active_ = false;
    if (size_ == 0 || size_ > max_size_ || !std::has_single_bit(size_)) {
        // §2.7: a split queue's size is a power of two, at most QueueNumMax.
        return make_error("queue size {} is not a power of two up to {}", size_, max_size_);
    }
    auto desc = ring_view(memory, desc_table_, sizeof(RawDescriptor) * size_, 16, "descriptor table");
    if (!desc) {
        return desc.error();
    }
    auto avail = ring_view(memory, avail_ring_, avail_ring_bytes(size_), 2, "available ring");
    if (!avail) {
        return avail.error();
    }
    auto used = ring_view(memory, used_ring_, used_ring_bytes(size_), 4, "used ring");
    if (!used) {
        return used.error();
    }
    memory_ = &memory;
    avail_ = *avail;
    used_ = *used;
    event_idx_ = event_idx;
    active_ = true;
    return ok();
}

void Queue::set_indirect_allowed(bool allowed) { indirect_allowed_ = allowed; }

void Queue::reset() {
    *this = Queue(max_size_);
}

std::uint16_t Queue::avail_idx() const { return load16(avail_ + 2, std::memory_order_acquire); }
std::uint16_t Queue::avail_flags() const { return load16(avail_); }
std::uint16_t Queue::used_event() const { return load16(avail_ + kRingHeader + 2ULL * size_); }

Result<bool> Queue::has_available() const {
    if (!active_) {
        return make_error("queue is not active");
    }
    return avail_idx() != next_avail_;
}

Result<bool> Queue::pop(DescriptorChain& chain) {
    if (!active_) {
        return make_error("queue is not active");
    }
    const std::uint16_t idx = avail_idx();
    const auto pending = static_cast<std::uint16_t>(idx - next_avail_);
    if (pending == 0) {
        return false;
    }
    if (pending > size_) {
        return make_error("available index jumped by {} entries on a queue of {}", pending, size_);
    }
    // Every chain the device holds occupies a descriptor of the table until
    // it is used (§2.7.13), so a driver has at most queue-size chains out:
    // more means heads made available again before they came back. Bounded
    // here, what the device holds is always a state a snapshot restores.
    if (static_cast<std::uint16_t>(next_avail_ - next_used_) >= size_) {
        return make_error("{} chains already held on a queue of {}: a head made available twice",
                          static_cast<std::uint16_t>(next_avail_ - next_used_), size_);
    }
    const std::uint16_t head = load16(avail_ + kRingHeader + 2ULL * (next_avail_ % size_));
    ++next_avail_;
    DescriptorTable table{memory_, GuestAddress(desc_table_), size_, indirect_allowed_};
    if (auto r = chain.parse(table, head); !r) {
        return r.error();
    }
    return true;
}

Result<void> Queue::add_used(std::uint16_t head, std::uint32_t written) {
    if (!active_) {
        return make_error("queue is not active");
    }
    if (head >= size_) {
        return make_error("used head {} is not below the queue size {}", head, size_);
    }
    std::uint8_t* elem = used_ + kRingHeader + kUsedElemSize * (next_used_ % size_);
    const std::uint32_t id = head;
    std::memcpy(elem, &id, 4);
    std::memcpy(elem + 4, &written, 4);
    ++next_used_;
    // §2.7.8.2: the element is visible before the index that publishes it.
    store16(used_ + 2, next_used_, std::memory_order_release);
    return ok();
}

bool Queue::needs_notification() {
    if (!active_) {
        return false;
    }
    // The used index store must be visible before the driver's suppression
    // fields are read, or both sides can miss each other (§2.7.7.2).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!event_idx_) {
        return (avail_flags() & kAvailFlagNoInterrupt) == 0;
    }
    const std::uint16_t old_used = signalled_used_;
    const bool valid = signalled_valid_;
    signalled_used_ = next_used_;
    signalled_valid_ = true;
    if (!valid) {
        return true;
    }
    // vring_need_event(used_event, new, old)
    const std::uint16_t event = used_event();
    return static_cast<std::uint16_t>(next_used_ - event - 1) < static_cast<std::uint16_t>(next_used_ - old_used);
}

void Queue::disable_notification() {
    if (active_ && !event_idx_) {
        store16(used_, kUsedFlagNoNotify);
    }
}

Result<bool> Queue::enable_notification() {
    if (!active_) {
        return make_error("queue is not active");
    }
    if (event_idx_) {
        store16(used_ + kRingHeader + kUsedElemSize * size_, next_avail_);  // avail_event
    } else {
        store16(used_, 0);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return avail_idx() != next_avail_;
}

Result<bool> Queue::pop_or_enable_notification(DescriptorChain& chain) {
    while (true) {
        auto popped = pop(chain);
        if (!popped || *popped) {
            return popped;
        }
        auto more = enable_notification();
        if (!more || !*more) {
            return more;
        }
        disable_notification();
    }
}

QueueState Queue::save() const {
    return QueueState{max_size_,   size_,      ready_,          desc_table_,      avail_ring_,
                      used_ring_,  next_avail_, next_used_,     signalled_used_,  signalled_valid_,
                      event_idx_,  indirect_allowed_, active_};
}

Result<void> Queue::restore(const GuestMemory& memory, const QueueState& state) {
    if (state.max_size != max_size_) {
        return make_error("saved queue has {} entries at most, this device {}", state.max_size, max_size_);
    }
    reset();
    if (!state.active && (state.next_avail != 0 || state.next_used != 0 || state.signalled_used != 0 ||
                          state.signalled_valid || state.event_idx)) {
        return make_error("saved queue is inactive but has ring positions");
    }
    if (state.active && static_cast<std::uint16_t>(state.next_avail - state.next_used) > state.size) {
        return make_error("saved queue has {} chains outstanding on a queue of {}",
                          static_cast<std::uint16_t>(state.next_avail - state.next_used), state.size);
    }
    size_ = state.size;
    ready_ = state.ready;
    desc_table_ = state.desc_table;
    avail_ring_ = state.avail_ring;
    used_ring_ = state.used_ring;
    indirect_allowed_ = state.indirect_allowed;
    if (state.active) {
        if (auto r = activate(memory, state.event_idx); !r) {
            reset();
            return r.error().context("restoring queue");
        }
    }
    next_avail_ = state.next_avail;
    next_used_ = state.next_used;
    signalled_used_ = state.signalled_used;
    signalled_valid_ = state.signalled_valid;
    return ok();
}

void QueueState::encode(ByteWriter& out) const {
    out.u16(kVersion);
    out.u16(max_size);
    out.u16(size);
    out.boolean(ready);
    out.u64(desc_table);
    out.u64(avail_ring);
    out.u64(used_ring);
    out.u16(next_avail);
    out.u16(next_used);
    out.u16(signalled_used);
    out.boolean(signalled_valid);
    out.boolean(event_idx);
    out.boolean(indirect_allowed);
    out.boolean(active);
}

Result<QueueState> QueueState::decode(ByteReader& in) {
    const std::uint16_t version = in.u16();
    if (!in.failed() && version != kVersion) {
        return make_error("queue state version {} is not {}", version, kVersion);
    }
    QueueState s;
    s.max_size = in.u16();
    s.size = in.u16();
    s.ready = in.boolean();
    s.desc_table = in.u64();
    s.avail_ring = in.u64();
    s.used_ring = in.u64();
    s.next_avail = in.u16();
    s.next_used = in.u16();
    s.signalled_used = in.u16();
    s.signalled_valid = in.boolean();
    s.event_idx = in.boolean();
    s.indirect_allowed = in.boolean();
    s.active = in.boolean();
    if (in.failed()) {
        return in.finish("queue state").error();
    }
    return s;
}

}  // namespace sbx::virtio

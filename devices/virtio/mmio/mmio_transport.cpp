#include "devices/virtio/mmio/mmio_transport.hpp"

#include <cstring>
#include <unordered_set>

#include "base/log.hpp"

namespace sbx::virtio {

class MmioTransport::Interrupt final : public DeviceInterrupt {
public:
    explicit Interrupt(MmioTransport& t) : t_(t) {}
    void signal_used() override {
        t_.interrupt_status_.fetch_or(kInterruptUsedBuffer);
        t_.irq_.trigger();
    }
    void signal_config() override {
        ++t_.config_generation_;
        t_.interrupt_status_.fetch_or(kInterruptConfigChange);
        t_.irq_.trigger();
    }

private:
    MmioTransport& t_;
};

// Called with the device lock held (from activate() or from a handler).
class MmioTransport::Events final : public DeviceEvents {
public:
    explicit Events(MmioTransport& t) : t_(t) {}

    Result<void> add(int fd, std::uint32_t events, Handler handler) override {
        const std::uint64_t generation = t_.generation_;
        auto wrapped = [this, generation, h = std::move(handler)](std::uint32_t ev) {
            std::lock_guard lock(t_.mutex_);
            if (generation != t_.generation_ || !t_.running()) {
                return;  // a reset or failure since this was queued
            }
            if (auto r = h(ev); !r) {
                t_.fail(r.error());
            }
        };
        if (auto r = t_.loop_.add(fd, events, std::move(wrapped)); !r) {
            return r.error();
        }
        fds_.insert(fd);
        return ok();
    }
    Result<void> modify(int fd, std::uint32_t events) override { return t_.loop_.modify(fd, events); }
    void remove(int fd) override {
        t_.loop_.remove(fd);
        fds_.erase(fd);
    }
    void remove_all() {
        for (int fd : fds_) {
            t_.loop_.remove(fd);
        }
        fds_.clear();
    }

private:
    MmioTransport& t_;
    std::unordered_set<int> fds_;
};

MmioTransport::MmioTransport(std::unique_ptr<VirtioDevice> device, const GuestMemory& memory, InterruptLine& irq,
                             EventLoop& loop)
    : device_(std::move(device)),
      memory_(memory),
      irq_(irq),
      loop_(loop),
      interrupt_(std::make_unique<Interrupt>(*this)),
      events_(std::make_unique<Events>(*this)) {
    for (std::uint16_t max : device_->queue_sizes()) {
        queues_.emplace_back(max);
    }
}

MmioTransport::~MmioTransport() {
    // Quiesce while the interrupt and event objects still exist: a device
    // with I/O in flight into guest memory waits for it in reset().
    std::lock_guard lock(mutex_);
    events_->remove_all();
    if (activated_) {
        device_->reset();
    }
}

std::uint32_t MmioTransport::status() const {
    std::lock_guard lock(mutex_);
    return status_;
}

std::uint64_t MmioTransport::offered_features() const {
    return device_->features() | kFeatureVersion1 | kFeatureEventIdx | kFeatureIndirectDesc;
}

Queue* MmioTransport::selected_queue() {
    return queue_sel_ < queues_.size() ? &queues_[queue_sel_] : nullptr;
}

void MmioTransport::read(std::uint64_t offset, std::span<std::uint8_t> data) {
    std::lock_guard lock(mutex_);
    if (offset >= mmio_reg::kConfig) {
        device_->read_config(offset - mmio_reg::kConfig, data);
        return;
    }
    // §4.2.2.2: the driver uses 32-bit accesses for registers.
    std::uint32_t value = (data.size() == 4 && offset % 4 == 0) ? read_register(offset) : 0;
    std::memset(data.data(), 0, data.size());
    std::memcpy(data.data(), &value, std::min<std::size_t>(data.size(), 4));
}

void MmioTransport::write(std::uint64_t offset, std::span<const std::uint8_t> data) {
    if (offset == mmio_reg::kQueueNotify && data.size() == 4) {
        // Normally an ioeventfd catches this write; this is the fallback.
        std::uint32_t index = 0;
        std::memcpy(&index, data.data(), 4);
        notify(index);
        return;
    }
    std::lock_guard lock(mutex_);
    if (offset >= mmio_reg::kConfig) {
        if (!activated_ || running()) {
            device_->write_config(offset - mmio_reg::kConfig, data);
        }
        return;
    }
    if (data.size() != 4 || offset % 4 != 0) {
        return;
    }
    std::uint32_t value = 0;
    std::memcpy(&value, data.data(), 4);
    write_register(offset, value);
}

std::uint32_t MmioTransport::read_register(std::uint64_t offset) const {
    using namespace mmio_reg;
    const Queue* queue = queue_sel_ < queues_.size() ? &queues_[queue_sel_] : nullptr;
    switch (offset) {
    case kMagic: return kMmioMagic;
    case kVersion: return kMmioVersion;
    case kDeviceId: return static_cast<std::uint32_t>(device_->type());
    case kVendorId: return kMmioVendorId;
    case kDeviceFeatures:
        return device_features_sel_ < 2 ? static_cast<std::uint32_t>(offered_features() >> (32 * device_features_sel_)) : 0;
    case kQueueNumMax: return queue != nullptr ? queue->max_size() : 0;
    case kQueueReady: return queue != nullptr && queue->ready() ? 1 : 0;
    case kInterruptStatus: return interrupt_status_.load();
    case kStatus: return status_;
    case kShmLenLow:
    case kShmLenHigh: return 0xffffffff;  // no shared memory regions
    case kConfigGeneration: return config_generation_;
    default: return 0;
    }
}

void MmioTransport::write_register(std::uint64_t offset, std::uint32_t value) {
    using namespace mmio_reg;
    auto set_low = [](std::uint64_t old, std::uint32_t v) { return (old & ~0xffffffffULL) | v; };
    auto set_high = [](std::uint64_t old, std::uint32_t v) { return (old & 0xffffffffULL) | (std::uint64_t{v} << 32); };
    // Queue and feature registers are the driver's only until FEATURES_OK /
    // DRIVER_OK (§3.1.1); later writes are ignored rather than half-applied.
    const bool queue_writable = (status_ & kStatusDriverOk) == 0;
    Queue* queue = selected_queue();
    switch (offset) {
    case kDeviceFeaturesSel: device_features_sel_ = value; break;
    case kDriverFeaturesSel: driver_features_sel_ = value; break;
    case kDriverFeatures:
        if ((status_ & kStatusFeaturesOk) == 0 && driver_features_sel_ < 2) {
            driver_features_ = driver_features_sel_ == 0 ? set_low(driver_features_, value)
                                                        : set_high(driver_features_, value);
        }
        break;
    case kQueueSel: queue_sel_ = value; break;
    case kQueueNum:
        if (queue != nullptr && queue_writable) {
            queue->set_size(static_cast<std::uint16_t>(std::min<std::uint32_t>(value, 0xffff)));
        }
        break;
    case kQueueReady:
        if (queue != nullptr && queue_writable) {
            queue->set_ready(value == 1);
        }
        break;
    case kQueueDescLow:
    case kQueueDescHigh:
    case kQueueDriverLow:
    case kQueueDriverHigh:
    case kQueueDeviceLow:
    case kQueueDeviceHigh:
        if (queue != nullptr && queue_writable) {
            const bool high = (offset & 4) != 0;
            auto set = [&](std::uint64_t old) { return high ? set_high(old, value) : set_low(old, value); };
            if (offset <= kQueueDescHigh) {
                queue->set_desc_table(set(queue->desc_table()));
            } else if (offset <= kQueueDriverHigh) {
                queue->set_avail_ring(set(queue->avail_ring()));
            } else {
                queue->set_used_ring(set(queue->used_ring()));
            }
        }
        break;
    case kInterruptAck: interrupt_status_.fetch_and(~value); break;
    case kStatus: write_status(value); break;
    default: break;  // read-only or unknown: ignored
    }
}

void MmioTransport::write_status(std::uint32_t value) {
    if (value == 0) {
        reset_device();
        return;
    }
    // The driver only adds bits (§3.1.1), and only those §2.1 gives it;
    // NEEDS_RESET is the device's own. A reserved bit kept here would be a
    // status no snapshot restores.
    constexpr std::uint32_t kDriverBits =
        kStatusAcknowledge | kStatusDriver | kStatusDriverOk | kStatusFeaturesOk | kStatusFailed;
    std::uint32_t added = value & ~status_ & kDriverBits;
    if ((added & kStatusDriverOk) != 0 && ((status_ | added) & kStatusFeaturesOk) == 0) {
        // §3.1.1: DRIVER_OK comes after FEATURES_OK. Taken before it, the
        // device would show DRIVER_OK without ever being activated.
        warn_guest("DRIVER_OK without FEATURES_OK refused");
        added &= ~kStatusDriverOk;
    }
    if ((added & kStatusFeaturesOk) != 0) {
        const std::uint64_t unknown = driver_features_ & ~offered_features();
        if (unknown != 0 || (driver_features_ & kFeatureVersion1) == 0) {
            // §2.2.2: leave FEATURES_OK clear so the driver sees the refusal.
            warn_guest(fmt::format("driver features {:#x} refused (offered {:#x}; VERSION_1 is required)",
                                   driver_features_, offered_features()));
            status_ |= added & ~kStatusFeaturesOk & ~kStatusDriverOk;
            return;
        }
    }
    status_ |= added;
    if ((added & kStatusDriverOk) != 0 && (status_ & kStatusFeaturesOk) != 0 && !activated_) {
        activate();
    }
}

void MmioTransport::activate() {
    activated_ = true;
    const bool event_idx = (driver_features_ & kFeatureEventIdx) != 0;
    const bool indirect = (driver_features_ & kFeatureIndirectDesc) != 0;
    for (std::size_t i = 0; i < queues_.size(); ++i) {
        Queue& q = queues_[i];
        if (!q.ready()) {
            continue;
        }
        q.set_indirect_allowed(indirect);
        if (auto r = q.activate(memory_, event_idx); !r) {
            fail(r.error().context(fmt::format("queue {}", i)));
            return;
        }
    }
    ActiveContext context{&memory_, queues_, driver_features_, interrupt_.get(), events_.get()};
    if (auto r = device_->activate(context); !r) {
        fail(r.error().context("activating"));
    }
}

void MmioTransport::reset_device() {
    events_->remove_all();
    device_->reset();
    ++generation_;
    for (Queue& q : queues_) {
        q.reset();
    }
    status_ = 0;
    device_features_sel_ = driver_features_sel_ = queue_sel_ = 0;
    driver_features_ = 0;
    activated_ = false;
    interrupt_status_ = 0;
}

void MmioTransport::fail(const Error& error) {
    if ((status_ & kStatusNeedsReset) != 0) {
        return;
    }
    warn_guest(error.to_string() + "; device needs reset");
    events_->remove_all();
    device_->reset();
    ++generation_;
    status_ |= kStatusNeedsReset;
    interrupt_->signal_config();  // §2.1.2: tell the driver
}

void MmioTransport::warn_guest(const std::string& what) {
    std::uint64_t held_back = 0;
    if (!log_budget_.take(held_back)) {
        return;
    }
    if (held_back > 0) {
        log::warn("{}: {} (and {} warnings like it from this device not logged)", device_->name(), what,
                  held_back);
    } else {
        log::warn("{}: {}", device_->name(), what);
    }
}

void MmioTransport::notify(std::size_t index) {
    std::lock_guard lock(mutex_);
    if (!running() || index >= queues_.size() || !queues_[index].active()) {
        return;
    }
    if (auto r = device_->process_queue(index); !r) {
        fail(r.error().context(fmt::format("queue {}", index)));
    }
}

MmioTransportState MmioTransport::save() const {
    std::lock_guard lock(mutex_);
    return save_locked();
}

MmioTransportState MmioTransport::save_locked() const {
    MmioTransportState s{status_,          device_features_sel_, driver_features_sel_, driver_features_, queue_sel_,
                         interrupt_status_, config_generation_,  {}};
    for (const Queue& q : queues_) {
        s.queues.push_back(q.save());
    }
    return s;
}

void MmioTransportState::encode(ByteWriter& out) const {
    out.u16(kVersion);
    out.u32(status);
    out.u32(device_features_sel);
    out.u32(driver_features_sel);
    out.u64(driver_features);
    out.u32(queue_sel);
    out.u32(interrupt_status);
    out.u32(config_generation);
    out.u32(static_cast<std::uint32_t>(queues.size()));
    for (const QueueState& q : queues) {
        q.encode(out);
    }
}

Result<MmioTransportState> MmioTransportState::decode(ByteReader& in) {
    const std::uint16_t version = in.u16();
    if (!in.failed() && version != kVersion) {
        return make_error("virtio-mmio register state version {} is not {}", version, kVersion);
    }
    MmioTransportState s;
    s.status = in.u32();
    s.device_features_sel = in.u32();
    s.driver_features_sel = in.u32();
    s.driver_features = in.u64();
    s.queue_sel = in.u32();
    s.interrupt_status = in.u32();
    s.config_generation = in.u32();
    constexpr std::size_t kMinQueueBytes = 40;  // an encoded QueueState
    const std::uint32_t count = in.count(kMinQueueBytes, kMaxQueues);
    for (std::uint32_t i = 0; i < count && !in.failed(); ++i) {
        auto q = QueueState::decode(in);
        if (!q) {
            return q.error().context(fmt::format("queue {}", i));
        }
        s.queues.push_back(*q);
    }
    if (in.failed()) {
        return in.finish("virtio-mmio register state").error();
    }
    return s;
}

Result<void> MmioTransport::quiesce() {
    std::lock_guard lock(mutex_);
    // Not running: never activated, or failed (fail() reset the device).
    if (!running()) {
        return ok();
    }
    if (auto r = device_->quiesce(); !r) {
        return r.error().context(fmt::format("{}: quiescing", device_->name()));
    }
    return ok();
}

std::vector<std::uint8_t> MmioTransport::save_state() const {
    std::lock_guard lock(mutex_);
    ByteWriter out;
    out.u16(kStateVersion);
    out.u32(static_cast<std::uint32_t>(device_->type()));
    save_locked().encode(out);
    ByteWriter device;
    device_->save_state(device);
    out.blob(device.bytes());
    return out.take();
}

Result<void> MmioTransport::restore_state(std::span<const std::uint8_t> bytes) {
    std::lock_guard lock(mutex_);
    reset_device();
    if (auto r = restore_locked(bytes); !r) {
        reset_device();
        return r.error().context(device_->name());
    }
    resume_restored();
    return ok();
}

Result<void> MmioTransport::restore_locked(std::span<const std::uint8_t> bytes) {
    ByteReader in(bytes);
    const std::uint16_t version = in.u16();
    if (!in.failed() && version != kStateVersion) {
        return make_error("virtio-mmio state version {} is not {}", version, kStateVersion);
    }
    const std::uint32_t type = in.u32();
    auto state = MmioTransportState::decode(in);
    if (!state) {
        return state.error();
    }
    const auto device_bytes = in.blob(kMaxDeviceStateBytes);
    if (auto r = in.finish("virtio-mmio state"); !r) {
        return r;
    }
    const MmioTransportState& s = *state;
    if (type != static_cast<std::uint32_t>(device_->type())) {
        return make_error("the snapshot holds device type {}, this is device type {}", type,
                          static_cast<std::uint32_t>(device_->type()));
    }
    if (s.queues.size() != queues_.size()) {
        return make_error("the snapshot has {} queues, this device {}", s.queues.size(), queues_.size());
    }
    constexpr std::uint32_t kKnownStatus = kStatusAcknowledge | kStatusDriver | kStatusDriverOk |
                                           kStatusFeaturesOk | kStatusNeedsReset | kStatusFailed;
    if ((s.status & ~kKnownStatus) != 0) {
        return make_error("saved status {:#x} has unknown bits", s.status);
    }
    // write_status() activates exactly when DRIVER_OK and FEATURES_OK are
    // both set, and only an active device fails into NEEDS_RESET.
    const bool activated = (s.status & kStatusDriverOk) != 0 && (s.status & kStatusFeaturesOk) != 0;
    const bool needs_reset = (s.status & kStatusNeedsReset) != 0;
    if (needs_reset && !activated) {
        return make_error("saved status {:#x} needs a reset but was never activated", s.status);
    }
    if ((s.status & kStatusFeaturesOk) != 0) {
        const std::uint64_t unknown = s.driver_features & ~offered_features();
        if (unknown != 0 || (s.driver_features & kFeatureVersion1) == 0) {
            return make_error(
                "saved features {:#x} are not what this device offers ({:#x}, VERSION_1 required)",
                s.driver_features, offered_features());
        }
    }
    if ((s.interrupt_status & ~(kInterruptUsedBuffer | kInterruptConfigChange)) != 0) {
        return make_error("saved interrupt status {:#x} has unknown bits", s.interrupt_status);
    }
    const bool event_idx = (s.driver_features & kFeatureEventIdx) != 0;
    const bool indirect = (s.driver_features & kFeatureIndirectDesc) != 0;
    std::vector<Queue> restored;
    for (std::size_t i = 0; i < queues_.size(); ++i) {
        const QueueState& qs = s.queues[i];
        const auto where = fmt::format("queue {}", i);
        if (qs.active &&
            (!activated || !qs.ready || qs.event_idx != event_idx || qs.indirect_allowed != indirect)) {
            return make_error("{}: saved active without the driver having set it up so", where);
        }
        if (activated && !needs_reset && qs.ready && !qs.active) {
            return make_error("{}: saved ready but inactive on a running device", where);
        }
        Queue& q = restored.emplace_back(queues_[i].max_size());
        if (auto r = q.restore(memory_, qs); !r) {
            return r.error().context(where);
        }
    }
    ByteReader device_in(device_bytes);
    if (auto r = device_->restore_state(device_in); !r) {
        return r.error().context("device state");
    }
    if (auto r = device_in.finish("device state"); !r) {
        return r;
    }
    // Committed from here on. Element by element: the vector's storage is
    // what the device's context points at.
    for (std::size_t i = 0; i < queues_.size(); ++i) {
        queues_[i] = std::move(restored[i]);
    }
    status_ = s.status;
    device_features_sel_ = s.device_features_sel;
    driver_features_sel_ = s.driver_features_sel;
    driver_features_ = s.driver_features;
    queue_sel_ = s.queue_sel;
    config_generation_ = s.config_generation;
    interrupt_status_ = s.interrupt_status;
    activated_ = activated;
    if (running()) {
        ActiveContext context{&memory_, queues_, driver_features_, interrupt_.get(), events_.get()};
        if (auto r = device_->activate(context); !r) {
            return r.error().context("activating");
        }
    }
    return ok();
}

// The restored device's first steps. Anything failing here is in the
// guest's rings, not in the snapshot: NEEDS_RESET, as it would be live.
void MmioTransport::resume_restored() {
    if (running()) {
        if (auto r = device_->after_restore(); !r) {
            fail(r.error().context("after restore"));
        }
    }
    for (std::size_t i = 0; i < queues_.size() && running(); ++i) {
        if (queues_[i].active()) {
            if (auto r = device_->process_queue(i); !r) {
                fail(r.error().context(fmt::format("queue {}", i)));
            }
        }
    }
    if (interrupt_status_.load() != 0) {
        irq_.trigger();  // the edge may have been lost with the old VM
    }
}

}  // namespace sbx::virtio

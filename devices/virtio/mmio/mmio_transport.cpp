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
    // The driver only adds bits (§3.1.1); NEEDS_RESET is the device's own.
    const std::uint32_t added = value & ~status_ & ~kStatusNeedsReset;
    if ((added & kStatusFeaturesOk) != 0) {
        const std::uint64_t unknown = driver_features_ & ~offered_features();
        if (unknown != 0 || (driver_features_ & kFeatureVersion1) == 0) {
            // §2.2.2: leave FEATURES_OK clear so the driver sees the refusal.
            log::warn("{}: driver features {:#x} refused (offered {:#x}; VERSION_1 is required)", device_->name(),
                      driver_features_, offered_features());
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
    log::warn("{}: {}; device needs reset", device_->name(), error.to_string());
    events_->remove_all();
    device_->reset();
    ++generation_;
    status_ |= kStatusNeedsReset;
    interrupt_->signal_config();  // §2.1.2: tell the driver
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
    MmioTransportState s{status_,          device_features_sel_, driver_features_sel_, driver_features_, queue_sel_,
                         interrupt_status_, config_generation_,  {}};
    for (const Queue& q : queues_) {
        s.queues.push_back(q.save());
    }
    return s;
}

}  // namespace sbx::virtio

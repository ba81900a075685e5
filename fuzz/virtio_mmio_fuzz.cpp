// libFuzzer target: a hostile driver's register accesses (any offset in the
// 4 KiB window, any width, any value), queue notifications, writes to
// guest RAM and descriptor chains, against the virtio-mmio transport
// (virtio 1.2 §4.2.2) around a real virtio-rng, with snapshot round trips
// in between. After every step the transport must show what §2.1 and
// §3.1.1 allow and what mmio_transport.hpp promises. (What the device does
// with the chains is the virtqueue and device targets' concern: here the
// guest's buffers may overlap its rings.)
#include <algorithm>
#include <array>
#include <vector>

#include "devices/virtio/rng/rng.hpp"
#include "fuzz/virtio_bed.hpp"

namespace {

using namespace sbx;
using namespace sbx::virtio;
using sbx::fuzz::check;

constexpr std::uint64_t kMemory = 64 * 1024;
constexpr std::uint64_t kRingBase = 0x1000;
// §2.1: the status bits that exist.
constexpr std::uint32_t kKnownStatus = kStatusAcknowledge | kStatusDriver | kStatusDriverOk |
                                       kStatusFeaturesOk | kStatusNeedsReset | kStatusFailed;
constexpr std::array<std::uint64_t, 23> kRegisters{
    mmio_reg::kMagic,           mmio_reg::kVersion,         mmio_reg::kDeviceId,
    mmio_reg::kVendorId,        mmio_reg::kDeviceFeatures,  mmio_reg::kDeviceFeaturesSel,
    mmio_reg::kDriverFeatures,  mmio_reg::kDriverFeaturesSel, mmio_reg::kQueueSel,
    mmio_reg::kQueueNumMax,     mmio_reg::kQueueNum,        mmio_reg::kQueueReady,
    mmio_reg::kQueueNotify,     mmio_reg::kInterruptStatus, mmio_reg::kInterruptAck,
    mmio_reg::kStatus,          mmio_reg::kQueueDescLow,    mmio_reg::kQueueDescHigh,
    mmio_reg::kQueueDriverLow,  mmio_reg::kQueueDeviceLow,  mmio_reg::kShmLenLow,
    mmio_reg::kConfigGeneration, mmio_reg::kConfig,
};

std::unique_ptr<MmioTransport> make_transport(fuzz::Bed& bed) {
    return std::make_unique<MmioTransport>(Rng::create(), bed.memory, bed.irq, *bed.loop);
}

std::uint64_t offset_of(fuzz::Input& in) {
    const auto pick = in.take<std::uint16_t>();
    return (pick & 0x8000) != 0 ? kRegisters[pick % kRegisters.size()] : pick % kMmioWindow;
}

// What must hold between any two driver steps, and what the driver froze.
struct Model {
    std::uint64_t offered = 0;
    std::optional<std::uint64_t> features;        // since FEATURES_OK
    std::optional<std::vector<QueueState>> queues;  // since DRIVER_OK

    void check_state(const MmioTransport& t) {
        const MmioTransportState s = t.save();
        check((s.status & ~kKnownStatus) == 0);
        // §3.1.1: DRIVER_OK only after FEATURES_OK, and FEATURES_OK only on
        // features offered, VERSION_1 among them (§6.1).
        check((s.status & kStatusDriverOk) == 0 || (s.status & kStatusFeaturesOk) != 0);
        if ((s.status & kStatusFeaturesOk) != 0) {
            check((s.driver_features & ~offered) == 0 && (s.driver_features & kFeatureVersion1) != 0);
            check(!features || *features == s.driver_features);  // §4.2.2: ignored from then on
            features = s.driver_features;
        } else {
            features.reset();
        }
        check((s.interrupt_status & ~(kInterruptUsedBuffer | kInterruptConfigChange)) == 0);
        if ((s.status & kStatusDriverOk) == 0) {
            queues.reset();
            return;
        }
        if (!queues) {
            queues = s.queues;
        }
        // The queue configuration is the driver's only before DRIVER_OK.
        for (std::size_t i = 0; i < s.queues.size(); ++i) {
            const QueueState& a = (*queues)[i];
            const QueueState& b = s.queues[i];
            check(a.size == b.size && a.ready == b.ready && a.desc_table == b.desc_table &&
                  a.avail_ring == b.avail_ring && a.used_ring == b.used_ring);
        }
    }
};

// §4.2.2: what a register read gives; 0 for anything not readable, for
// widths other than 32 bits, and past rng's empty configuration space.
void check_read(const fuzz::Bed& bed, std::uint64_t offered, std::uint64_t offset,
                std::span<const std::uint8_t> data) {
    std::uint32_t value = 0;
    std::memcpy(&value, data.data(), std::min<std::size_t>(data.size(), 4));
    bool zero = true;
    for (std::uint8_t b : data.subspan(std::min<std::size_t>(data.size(), 4))) {
        zero = zero && b == 0;
    }
    check(zero);
    if (offset >= mmio_reg::kConfig || data.size() != 4 || offset % 4 != 0) {
        check(value == 0);
        return;
    }
    const MmioTransportState s = bed.transport->save();
    switch (offset) {
    case mmio_reg::kMagic: check(value == kMmioMagic); break;
    case mmio_reg::kVersion: check(value == kMmioVersion); break;
    case mmio_reg::kDeviceId: check(value == static_cast<std::uint32_t>(DeviceType::Rng)); break;
    case mmio_reg::kVendorId: check(value == kMmioVendorId); break;
    case mmio_reg::kQueueNumMax: check(value == (s.queue_sel == 0 ? Rng::kQueueSize : 0)); break;
    case mmio_reg::kQueueReady: check(value == (s.queue_sel == 0 && s.queues[0].ready ? 1 : 0)); break;
    case mmio_reg::kStatus: check(value == s.status); break;
    case mmio_reg::kInterruptStatus: check(value == s.interrupt_status); break;
    case mmio_reg::kConfigGeneration: check(value == s.config_generation); break;
    case mmio_reg::kDeviceFeatures:
        check(value == (s.device_features_sel < 2 ? static_cast<std::uint32_t>(offered >> (32 * s.device_features_sel)) : 0));
        break;
    case mmio_reg::kShmLenLow:
    case mmio_reg::kShmLenHigh: break;
    default: check(value == 0);
    }
}

// A snapshot of the transport restored into a fresh one on the same RAM,
// as a restored VM does: every state a driver can reach must restore
// (mmio_transport.hpp refuses only what no driver could produce), with the
// driver's configuration as it was.
void round_trip(fuzz::Bed& bed) {
    check(bed.transport->quiesce().has_value());
    const auto bytes = bed.transport->save_state();
    const MmioTransportState saved = bed.transport->save();
    bed.transport = make_transport(bed);
    check(bed.transport->restore_state(bytes).has_value());
    const MmioTransportState now = bed.transport->save();
    // Processing the restored queues may find a bad chain: NEEDS_RESET.
    check((now.status & ~kStatusNeedsReset) == (saved.status & ~kStatusNeedsReset));
    check(now.driver_features == saved.driver_features && now.queue_sel == saved.queue_sel);
    for (std::size_t i = 0; i < saved.queues.size(); ++i) {
        const QueueState& a = saved.queues[i];
        const QueueState& b = now.queues[i];
        check(a.size == b.size && a.ready == b.ready && a.desc_table == b.desc_table && a.active == b.active &&
              a.event_idx == b.event_idx && a.indirect_allowed == b.indirect_allowed);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Input in(data, size);
    fuzz::Bed bed(kMemory, Rng::create());
    Model model;
    bed.set_reg(mmio_reg::kDeviceFeaturesSel, 1);
    model.offered = std::uint64_t{bed.reg(mmio_reg::kDeviceFeatures)} << 32;
    bed.set_reg(mmio_reg::kDeviceFeaturesSel, 0);
    model.offered |= bed.reg(mmio_reg::kDeviceFeatures);
    check((model.offered & kFeatureVersion1) != 0);
    std::optional<fuzz::Ring> ring;

    for (int step = 0; step < 256 && !in.empty(); ++step) {
        const auto op = in.take<std::uint8_t>();
        switch (op % 9) {
        case 0: {  // a register or configuration write
            const std::uint64_t offset = offset_of(in);
            const std::size_t width = std::size_t{1} << (op >> 4) % 4;
            const auto value = in.take<std::uint64_t>();
            bed.transport->write(offset, std::span(reinterpret_cast<const std::uint8_t*>(&value), width));
            if (offset == mmio_reg::kStatus && width == 4 && static_cast<std::uint32_t>(value) == 0) {
                // §2.4: a reset leaves nothing of the driver's.
                const MmioTransportState s = bed.transport->save();
                check(s.status == 0 && s.interrupt_status == 0 && s.driver_features == 0 && !s.queues[0].ready);
            }
            break;
        }
        case 1: {  // a read
            const std::uint64_t offset = offset_of(in);
            std::array<std::uint8_t, 8> bytes{};
            bytes.fill(0xa5);
            const auto out = std::span(bytes).first(std::size_t{1} << (op >> 4) % 4);
            bed.transport->read(offset, out);
            check_read(bed, model.offered, offset, out);
            break;
        }
        case 2: bed.transport->notify(in.take<std::uint8_t>() % 3); break;  // an ioeventfd
        case 3: bed.pump(); break;
        case 4: {  // the driver writes RAM (rings, buffers)
            const auto at = in.take<std::uint16_t>();
            (void)bed.memory.write(GuestAddress(at), in.bytes(in.take<std::uint8_t>() % 32));
            break;
        }
        case 5: {  // the usual initialisation (§3.1.1), with features and a queue size of the input's
            const auto raw = in.take<std::uint64_t>();
            const auto shift = in.take<std::uint8_t>();
            const std::uint32_t queue_size = (shift & 0x80) != 0 ? shift : 1U << (shift % 9);
            model.features.reset();  // a reset comes first: nothing stays frozen
            model.queues.reset();
            bed.negotiate((op & 0x10) != 0 ? raw : model.offered & ~raw);
            ring.emplace(bed.memory, kRingBase, static_cast<std::uint16_t>(std::clamp(queue_size, 1U, 256U)));
            bed.setup_queue(0, queue_size, *ring);
            bed.driver_ok();
            break;
        }
        case 6: {  // a chain of raw descriptors, published (and notified)
            if (!ring) {
                break;
            }
            const auto head = in.take<std::uint8_t>();
            const int count = 1 + in.take<std::uint8_t>() % 4;
            for (int i = 0; i < count; ++i) {
                const auto flags = in.take<std::uint8_t>();
                RawDescriptor d{(flags & 0x80) != 0 ? in.take<std::uint64_t>() : in.take<std::uint16_t>(),
                                (flags & 0x40) != 0 ? in.take<std::uint32_t>() : in.take<std::uint16_t>(),
                                static_cast<std::uint16_t>(flags & 7), in.take<std::uint8_t>()};
                ring->descriptor(static_cast<std::uint16_t>(head + i), d);
            }
            ring->publish(head);
            if ((op & 0x10) != 0) {
                bed.set_reg(mmio_reg::kQueueNotify, 0);
            }
            break;
        }
        case 7: round_trip(bed); break;
        case 8:  // the driver reads every register in turn
            for (std::uint64_t offset : kRegisters) {
                std::array<std::uint8_t, 4> bytes{};
                bed.transport->read(offset, bytes);
                check_read(bed, model.offered, offset, bytes);
            }
            break;
        }
        model.check_state(*bed.transport);
    }
    round_trip(bed);
    model.check_state(*bed.transport);
    return 0;
}

// libFuzzer target: the restore decoders a snapshot's bytes reach (issue
// 14 item 4), chosen by the first byte:
//   0  decode_config (the VM's configuration section)
//   1  decode_machine (vCPUs, VM chips and clock, serial, i8042, and the
//      virtio blobs it carries)
//   2  MmioTransport::restore_state on a live virtio-rng transport over
//      guest memory: register, queue and device state, value checks, the
//      re-activation and the restored queues processed as if notified
//   3  Serial and I8042 restore into live devices
// Nothing may crash or read out of bounds. What is accepted must survive
// its own round trip: encode(decode(x)) decodes again to the same bytes
// (a restored transport saves, restores and saves the same state).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/event_loop.hpp"
#include "devices/legacy/i8042.hpp"
#include "devices/legacy/serial.hpp"
#include "devices/virtio/mmio/mmio_transport.hpp"
#include "devices/virtio/rng/rng.hpp"
#include "snapshot/machine_codec.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace {

using namespace sbx;

void check(bool ok) {
    if (!ok) {
        __builtin_trap();
    }
}

struct NoIrq : InterruptLine {
    void trigger() override {}
};

// One rng transport over 64 MiB of guest memory (the seeds' rings lie at
// 4 MiB, as devices/virtio/virtio_test_util.hpp lays them out) for the run.
struct Rig {
    Rig() {
        const MemoryRegionSpec ram{GuestAddress{0}, 64ULL << 20};
        auto m = GuestMemory::create(std::span(&ram, 1));
        auto l = EventLoop::create();
        check(m.has_value() && l.has_value());
        memory = std::make_unique<GuestMemory>(std::move(*m));
        loop = std::move(*l);
        transport = std::make_unique<virtio::MmioTransport>(virtio::Rng::create(), *memory, irq, *loop);
    }
    NoIrq irq;
    std::unique_ptr<GuestMemory> memory;
    std::unique_ptr<EventLoop> loop;
    std::unique_ptr<virtio::MmioTransport> transport;
};

void config(std::span<const std::uint8_t> bytes) {
    auto decoded = snapshot::decode_config(bytes);
    if (!decoded) {
        return;
    }
    const auto encoded = snapshot::encode_config(*decoded);
    auto again = snapshot::decode_config(encoded);
    check(again.has_value() && snapshot::encode_config(*again) == encoded);
}

void machine(std::span<const std::uint8_t> bytes) {
    auto decoded = snapshot::decode_machine(bytes);
    if (!decoded) {
        return;
    }
    const auto encoded = snapshot::encode_machine(*decoded);
    auto again = snapshot::decode_machine(encoded);
    check(again.has_value() && snapshot::encode_machine(*again) == encoded);
    for (const auto& blob : decoded->virtio) {
        ByteReader in(blob);
        (void)in.u16();
        (void)in.u32();
        (void)virtio::MmioTransportState::decode(in);
    }
}

void transport(std::span<const std::uint8_t> bytes) {
    static Rig rig;
    if (!rig.transport->restore_state(bytes)) {
        return;
    }
    check(rig.transport->quiesce().has_value());
    const auto saved = rig.transport->save_state();
    check(rig.transport->restore_state(saved).has_value());
    check(rig.transport->quiesce().has_value());
    check(rig.transport->save_state() == saved);
}

void legacy(std::span<const std::uint8_t> bytes) {
    static NoIrq irq;
    static Serial serial(irq, [] {});
    static I8042 i8042(irq, [] {});
    ByteReader in(bytes);
    if (auto s = Serial::State::decode(in); s) {
        check(serial.restore(*s).has_value());
        ByteWriter out;
        serial.save().encode(out);
        ByteReader back(out.bytes());
        check(Serial::State::decode(back).has_value());
    }
    if (auto k = I8042::State::decode(in); k) {
        check(i8042.restore(*k).has_value());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const std::span<const std::uint8_t> bytes(data + 1, size - 1);
    switch (data[0] % 4) {
        case 0: config(bytes); break;
        case 1: machine(bytes); break;
        case 2: transport(bytes); break;
        default: legacy(bytes); break;
    }
    return 0;
}

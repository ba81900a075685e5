#include "devices/pci/pci_function.hpp"

#include <bit>

namespace sbx {

namespace {

// Type-0 header registers (PCI Local Bus 3.0, §6.1, figure 6-1).
constexpr std::uint8_t kIdOffset = 0x00;           // vendor ID, device ID
constexpr std::uint8_t kCommandOffset = 0x04;      // command, status
constexpr std::uint8_t kClassOffset = 0x08;        // revision ID, class code
constexpr std::uint8_t kHeaderTypeOffset = 0x0c;   // cache line, latency, header type, BIST
constexpr std::uint8_t kBar0Offset = 0x10;
constexpr std::uint8_t kSubsystemOffset = 0x2c;
constexpr std::uint8_t kInterruptOffset = 0x3c;    // interrupt line, pin, min_gnt, max_lat

// Command bits the guest may set (§6.2.2): I/O space, memory space, bus
// master, interrupt disable. The rest are hardwired to 0 here.
constexpr std::uint16_t kCommandWritable = 0x0001 | 0x0002 | 0x0004 | 0x0400;
// Bit 0 of an I/O BAR reads 1 (§6.2.5.1).
constexpr std::uint32_t kBarIoSpace = 0x1;

std::uint32_t merge(std::uint32_t old_value, std::uint32_t value, std::uint8_t byte_mask) {
    std::uint32_t mask = 0;
    for (unsigned i = 0; i < 4; ++i) {
        if ((byte_mask & (1U << i)) != 0) {
            mask |= 0xffU << (8 * i);
        }
    }
    return (old_value & ~mask) | (value & mask);
}

}  // namespace

Result<PciFunction> PciFunction::create(const PciIdentity& identity, std::optional<PciIoBar> bar0) {
    if (bar0 && (bar0->size < 4 || !std::has_single_bit(bar0->size) || bar0->port % bar0->size != 0)) {
        return make_error("PCI I/O BAR at port {:#x} of {} ports: the size must be a power of two >= 4 "
                          "and the port aligned to it",
                          bar0->port, bar0->size);
    }
    return PciFunction(identity, bar0);
}

std::uint32_t PciFunction::read_dword(std::uint8_t offset) const {
    switch (offset) {
        case kIdOffset: return identity_.vendor_id | std::uint32_t{identity_.device_id} << 16;
        case kCommandOffset: return state_.command;  // status 0: no capabilities list
        case kClassOffset: return identity_.revision | identity_.class_code << 8;
        case kHeaderTypeOffset:  // header type 0, single function, no BIST
            return state_.cache_line_size | std::uint32_t{state_.latency_timer} << 8;
        case kBar0Offset:
            if (!bar0_) {
                return 0;  // an unimplemented BAR is hardwired to 0 (§6.2.5.1)
            }
            // After all ones are written, the writable address bits read
            // back as ones: the guest learns the size from the lowest one.
            return state_.bar0_sizing ? (~std::uint32_t{bar0_->size} + 1) | kBarIoSpace
                                      : std::uint32_t{bar0_->port} | kBarIoSpace;
        case kSubsystemOffset:
            return identity_.subsystem_vendor_id | std::uint32_t{identity_.subsystem_id} << 16;
        case kInterruptOffset: return state_.interrupt_line;  // interrupt pin 0: none
        default: return 0;  // BARs 1-5, CardBus CIS, expansion ROM, capabilities, device-specific
    }
}

void PciFunction::write_dword(std::uint8_t offset, std::uint32_t value, std::uint8_t byte_mask) {
    const std::uint32_t merged = merge(read_dword(offset), value, byte_mask);
    switch (offset) {
        case kCommandOffset:  // the status half is write-1-to-clear, and nothing is ever set
            state_.command = static_cast<std::uint16_t>(merged & kCommandWritable);
            break;
        case kHeaderTypeOffset:
            state_.cache_line_size = static_cast<std::uint8_t>(merged);
            state_.latency_timer = static_cast<std::uint8_t>(merged >> 8);
            break;
        case kBar0Offset:
            // The address is the VMM's: any write but the sizing probe
            // leaves it where it is, like a BAR firmware assigned and the
            // guest keeps (Linux restores the value it read after sizing).
            state_.bar0_sizing = bar0_ && merged == 0xffffffff;
            break;
        case kInterruptOffset: state_.interrupt_line = static_cast<std::uint8_t>(merged); break;
        default: break;  // read-only or hardwired registers
    }
}

PciFunction::State PciFunction::save() const {
    return state_;
}

void PciFunction::restore(const State& state) {
    state_ = state;
    state_.command &= kCommandWritable;
    state_.bar0_sizing = state.bar0_sizing && bar0_;
}

void PciFunction::State::encode(ByteWriter& out) const {
    out.u16(kVersion);
    out.u16(command);
    out.u8(cache_line_size);
    out.u8(latency_timer);
    out.u8(interrupt_line);
    out.boolean(bar0_sizing);
}

Result<PciFunction::State> PciFunction::State::decode(ByteReader& in) {
    const std::uint16_t version = in.u16();
    if (!in.failed() && version != kVersion) {
        return make_error("PCI function state version {} is not {}", version, kVersion);
    }
    State s;
    s.command = in.u16();
    s.cache_line_size = in.u8();
    s.latency_timer = in.u8();
    s.interrupt_line = in.u8();
    s.bar0_sizing = in.boolean();
    if (in.failed()) {
        return in.finish("PCI function state").error();
    }
    return s;
}

}  // namespace sbx

#include "devices/pci/pci_host.hpp"

#include <algorithm>

namespace sbx {

namespace {

// CONFIG_ADDRESS (§3.2.2.3.2, figure 3-2): bit 31 enable, 23:16 bus,
// 15:11 device, 10:8 function, 7:2 register; 1:0 read as 0. Bits 30:24
// are reserved (AMD puts extended register bits in 27:24; none exist here).
constexpr std::uint32_t kAddressEnable = 1U << 31;
constexpr std::uint32_t kAddressWritable = kAddressEnable | 0x00fffffc;
constexpr std::uint64_t kAddressOffset = 0;  // port 0xcf8
constexpr std::uint64_t kDataOffset = 4;     // ports 0xcfc-0xcff

unsigned address_bus(std::uint32_t a) { return (a >> 16) & 0xff; }
unsigned address_device(std::uint32_t a) { return (a >> 11) & 0x1f; }
unsigned address_function(std::uint32_t a) { return (a >> 8) & 0x7; }
std::uint8_t address_register(std::uint32_t a) { return static_cast<std::uint8_t>(a & 0xfc); }

}  // namespace

PciHost::PciHost() {
    slots_[kHostBridgeSlot] = std::make_unique<PciFunction>(
        PciIdentity{.vendor_id = 0x1b36, .device_id = 0x0008, .class_code = 0x060000});
}

Result<void> PciHost::attach(unsigned slot, PciFunction function) {
    std::lock_guard lock(mutex_);
    if (slot >= kSlots) {
        return make_error("PCI slot {} is out of range (0-{})", slot, kSlots - 1);
    }
    if (slots_[slot]) {
        return make_error("PCI slot {} is taken", slot);
    }
    slots_[slot] = std::make_unique<PciFunction>(std::move(function));
    return ok();
}

PciFunction* PciHost::selected() const {
    const std::uint32_t a = config_address_;
    if ((a & kAddressEnable) == 0 || address_bus(a) != 0 || address_function(a) != 0) {
        return nullptr;
    }
    return slots_[address_device(a)].get();
}

void PciHost::read(std::uint64_t offset, std::span<std::uint8_t> data) {
    std::lock_guard lock(mutex_);
    std::fill(data.begin(), data.end(), std::uint8_t{0xff});  // nothing answers: all ones
    std::uint32_t value = 0;
    std::size_t shift = 0;
    if (offset == kAddressOffset && data.size() == 4) {
        value = config_address_;  // only dword accesses reach CONFIG_ADDRESS
    } else if (offset >= kDataOffset && offset - kDataOffset + data.size() <= 4) {
        const PciFunction* function = selected();
        if (function == nullptr) {
            return;
        }
        value = function->read_dword(address_register(config_address_));
        shift = offset - kDataOffset;
    } else {
        return;
    }
    for (std::size_t i = 0; i < data.size(); ++i) {
        data[i] = static_cast<std::uint8_t>(value >> (8 * (shift + i)));
    }
}

void PciHost::write(std::uint64_t offset, std::span<const std::uint8_t> data) {
    std::lock_guard lock(mutex_);
    std::uint32_t value = 0;
    for (std::size_t i = 0; i < data.size() && i < 4; ++i) {
        value |= std::uint32_t{data[i]} << (8 * i);
    }
    if (offset == kAddressOffset && data.size() == 4) {
        config_address_ = value & kAddressWritable;
    } else if (offset >= kDataOffset && offset - kDataOffset + data.size() <= 4) {
        PciFunction* function = selected();
        if (function == nullptr) {
            return;
        }
        const auto shift = static_cast<unsigned>(offset - kDataOffset);
        const auto byte_mask = static_cast<std::uint8_t>(((1U << data.size()) - 1) << shift);
        function->write_dword(address_register(config_address_), value << (8 * shift), byte_mask);
    }
    // Other accesses (a byte write to 0xcfb, as Linux's probe does) reach
    // no register.
}

PciHost::State PciHost::save() const {
    std::lock_guard lock(mutex_);
    State s{config_address_, {}};
    for (const auto& function : slots_) {
        if (function) {
            s.functions.push_back(function->save());
        }
    }
    return s;
}

Result<void> PciHost::restore(const State& state) {
    std::lock_guard lock(mutex_);
    const auto attached = static_cast<std::size_t>(
        std::count_if(slots_.begin(), slots_.end(), [](const auto& f) { return f != nullptr; }));
    if (state.functions.size() != attached) {
        return make_error("the PCI state has {} functions, this machine {}", state.functions.size(), attached);
    }
    config_address_ = state.config_address & kAddressWritable;
    std::size_t next = 0;
    for (auto& function : slots_) {
        if (function) {
            function->restore(state.functions[next++]);
        }
    }
    return ok();
}

void PciHost::State::encode(ByteWriter& out) const {
    out.u16(kVersion);
    out.u32(config_address);
    out.u32(static_cast<std::uint32_t>(functions.size()));
    for (const auto& f : functions) {
        f.encode(out);
    }
}

Result<PciHost::State> PciHost::State::decode(ByteReader& in) {
    const std::uint16_t version = in.u16();
    if (!in.failed() && version != kVersion) {
        return make_error("PCI host state version {} is not {}", version, kVersion);
    }
    State s;
    s.config_address = in.u32();
    const std::uint32_t n = in.count(1, kSlots);
    for (std::uint32_t i = 0; i < n && !in.failed(); ++i) {
        auto f = PciFunction::State::decode(in);
        if (!f) {
            return f.error();
        }
        s.functions.push_back(*f);
    }
    if (in.failed()) {
        return in.finish("PCI host state").error();
    }
    return s;
}

}  // namespace sbx

// Encoding of VcpuState and VmState. Layout (little-endian, base/byte_codec.hpp):
//   VcpuState: u16 version, u32 tsc_khz, u32 n + n x (7 x u32) CPUID entries,
//              blobs regs, sregs, xsave, xcrs, debugregs, lapic, events, mp_state,
//              u32 n + n x (u32 index, u64 value) MSRs.
//   VmState:   u16 version, blobs pic_master, pic_slave, ioapic, pit2, clock.
#include "vmm/kvm/kvm_state.hpp"

#include <cstring>

#include "vmm/kvm/linux_kvm.hpp"

namespace sbx::kvm {

namespace {

constexpr std::size_t kCpuidEntryBytes = 7 * sizeof(std::uint32_t);
constexpr std::size_t kMsrBytes = 4 + 8;
constexpr std::uint32_t kMaxXcrs = 16;  // KVM_MAX_XCRS, arch/x86/include/uapi/asm/kvm.h

// A blob that must be exactly `size` bytes (the image of a kernel structure).
void read_exact(ByteReader& r, std::vector<std::uint8_t>& out, std::size_t size, const char* what,
                std::string& error) {
    auto b = r.blob(size);
    if (r.failed()) {
        return;
    }
    if (b.size() != size && error.empty()) {
        error = fmt::format("{} is {} bytes, struct is {}", what, b.size(), size);
    }
    out.assign(b.begin(), b.end());
}

template <typename T>
T load(const std::vector<std::uint8_t>& image) {
    T value{};
    std::memcpy(&value, image.data(), sizeof(T));
    return value;
}

Result<void> reader_error(const ByteReader& r, const char* what) {
    // finish() reports the first read failure with its position.
    return r.finish(what);
}

}  // namespace

void VcpuState::encode(ByteWriter& w) const {
    w.u16(kVersion);
    w.u32(tsc_khz);
    w.u32(static_cast<std::uint32_t>(cpuid.size()));
    for (const auto& e : cpuid) {
        for (std::uint32_t v : {e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx}) {
            w.u32(v);
        }
    }
    for (const auto* image : {&regs, &sregs, &xsave, &xcrs, &debugregs, &lapic, &events, &mp_state}) {
        w.blob(*image);
    }
    w.u32(static_cast<std::uint32_t>(msrs.size()));
    for (const auto& [index, value] : msrs) {
        w.u32(index);
        w.u64(value);
    }
}

Result<VcpuState> VcpuState::decode(ByteReader& r) {
    constexpr const char* kWhat = "vCPU state";
    VcpuState s;
    std::uint16_t version = r.u16();
    if (!r.failed() && version != kVersion) {
        return make_error("{}: version {} (this build reads {})", kWhat, version, kVersion);
    }
    s.tsc_khz = r.u32();
    std::uint32_t n = r.count(kCpuidEntryBytes, kMaxCpuidEntries);
    s.cpuid.reserve(n);
    for (std::uint32_t i = 0; i < n && !r.failed(); ++i) {
        CpuidEntry e;
        e.function = r.u32();
        e.index = r.u32();
        e.flags = r.u32();
        e.eax = r.u32();
        e.ebx = r.u32();
        e.ecx = r.u32();
        e.edx = r.u32();
        s.cpuid.push_back(e);
    }
    std::string error;
    read_exact(r, s.regs, sizeof(kvm_regs), "regs", error);
    read_exact(r, s.sregs, sizeof(kvm_sregs), "sregs", error);
    auto xsave = r.blob(kMaxXsaveBytes);
    if (!r.failed() && error.empty() && (xsave.size() < sizeof(kvm_xsave) || xsave.size() % 4 != 0)) {
        error = fmt::format("xsave is {} bytes, not a kvm_xsave area (at least {}, whole u32s)", xsave.size(),
                            sizeof(kvm_xsave));
    }
    s.xsave.assign(xsave.begin(), xsave.end());
    read_exact(r, s.xcrs, sizeof(kvm_xcrs), "xcrs", error);
    read_exact(r, s.debugregs, sizeof(kvm_debugregs), "debugregs", error);
    read_exact(r, s.lapic, sizeof(kvm_lapic_state), "lapic", error);
    read_exact(r, s.events, sizeof(kvm_vcpu_events), "events", error);
    read_exact(r, s.mp_state, sizeof(kvm_mp_state), "mp_state", error);
    std::uint32_t nmsrs = r.count(kMsrBytes, kMaxMsrs);
    s.msrs.reserve(nmsrs);
    for (std::uint32_t i = 0; i < nmsrs && !r.failed(); ++i) {
        std::uint32_t index = r.u32();
        std::uint64_t value = r.u64();
        s.msrs.emplace_back(index, value);
    }
    if (r.failed()) {
        return reader_error(r, kWhat).error();
    }
    if (!error.empty()) {
        return make_error("{}: {}", kWhat, error);
    }
    if (auto xcrs = load<kvm_xcrs>(s.xcrs); xcrs.nr_xcrs > kMaxXcrs) {
        return make_error("{}: {} XCRs (at most {})", kWhat, xcrs.nr_xcrs, kMaxXcrs);
    }
    return s;
}

void VmState::encode(ByteWriter& w) const {
    w.u16(kVersion);
    for (const auto* image : {&pic_master, &pic_slave, &ioapic, &pit2, &clock}) {
        w.blob(*image);
    }
}

Result<VmState> VmState::decode(ByteReader& r) {
    constexpr const char* kWhat = "VM state";
    VmState s;
    std::uint16_t version = r.u16();
    if (!r.failed() && version != kVersion) {
        return make_error("{}: version {} (this build reads {})", kWhat, version, kVersion);
    }
    std::string error;
    read_exact(r, s.pic_master, sizeof(kvm_irqchip), "PIC master", error);
    read_exact(r, s.pic_slave, sizeof(kvm_irqchip), "PIC slave", error);
    read_exact(r, s.ioapic, sizeof(kvm_irqchip), "IOAPIC", error);
    read_exact(r, s.pit2, sizeof(kvm_pit_state2), "PIT", error);
    read_exact(r, s.clock, sizeof(kvm_clock_data), "kvmclock", error);
    if (r.failed()) {
        return reader_error(r, kWhat).error();
    }
    if (!error.empty()) {
        return make_error("{}: {}", kWhat, error);
    }
    const std::pair<const std::vector<std::uint8_t>*, std::uint32_t> chips[] = {
        {&s.pic_master, KVM_IRQCHIP_PIC_MASTER},
        {&s.pic_slave, KVM_IRQCHIP_PIC_SLAVE},
        {&s.ioapic, KVM_IRQCHIP_IOAPIC}};
    for (const auto& [image, id] : chips) {
        if (auto chip = load<kvm_irqchip>(*image); chip.chip_id != id) {
            return make_error("{}: irqchip image {} has chip id {}", kWhat, id, chip.chip_id);
        }
    }
    return s;
}

}  // namespace sbx::kvm

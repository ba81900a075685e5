#include "vmm/kvm/diagnosis.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstring>

#include "base/unique_fd.hpp"
#include "vmm/kvm/linux_kvm.hpp"
#include "vmm/kvm/state_image.hpp"

namespace sbx::kvm {

namespace {

const char* mp_state_name(std::uint32_t state) {
    switch (state) {
        case KVM_MP_STATE_RUNNABLE: return "runnable";
        case KVM_MP_STATE_UNINITIALIZED: return "uninitialized";
        case KVM_MP_STATE_INIT_RECEIVED: return "init_received";
        case KVM_MP_STATE_HALTED: return "halted";
        case KVM_MP_STATE_SIPI_RECEIVED: return "sipi_received";
        case KVM_MP_STATE_STOPPED: return "stopped";
        case KVM_MP_STATE_CHECK_STOP: return "check_stop";
        default: return "other";
    }
}

// Local APIC register page offsets (Intel SDM Vol. 3A Table 11-1).
constexpr std::size_t kApicTpr = 0x80;
constexpr std::size_t kApicIsr = 0x100;
constexpr std::size_t kApicIrr = 0x200;
constexpr std::size_t kApicLvtTimer = 0x320;
constexpr std::size_t kApicTimerInitial = 0x380;
constexpr std::size_t kApicTimerCurrent = 0x390;
constexpr std::uint32_t kMsrTscDeadline = 0x6e0;
constexpr std::uint64_t kRflagsIf = 1U << 9;

std::uint32_t apic_reg(const kvm_lapic_state& lapic, std::size_t offset) {
    std::uint32_t value = 0;
    std::memcpy(&value, lapic.regs + offset, sizeof value);
    return value;
}

// The highest vector set in a 256-bit ISR/IRR: eight 32-bit registers, 16 bytes apart.
int highest_vector(const kvm_lapic_state& lapic, std::size_t base) {
    for (int reg = 7; reg >= 0; --reg) {
        std::uint32_t bits = apic_reg(lapic, base + static_cast<std::size_t>(reg) * 0x10);
        if (bits != 0) {
            return reg * 32 + 31 - __builtin_clz(bits);
        }
    }
    return -1;
}

PicDiagnosis pic_of(const kvm_irqchip& chip) {
    return {chip.chip.pic.irr, chip.chip.pic.isr, chip.chip.pic.imr};
}

}  // namespace

Result<VcpuDiagnosis> diagnose_vcpu(std::uint32_t id, const VcpuState& state) {
    auto regs = from_image<kvm_regs>(state.regs, "vCPU registers");
    auto sregs = from_image<kvm_sregs>(state.sregs, "vCPU segment registers");
    auto mp = from_image<kvm_mp_state>(state.mp_state, "vCPU MP state");
    auto events = from_image<kvm_vcpu_events>(state.events, "vCPU events");
    auto lapic = from_image<kvm_lapic_state>(state.lapic, "local APIC");
    if (const Error* e = first_error(regs, sregs, mp, events, lapic)) {
        return *e;
    }
    VcpuDiagnosis d;
    d.id = id;
    d.rip = regs->rip;
    d.rsp = regs->rsp;
    d.rflags = regs->rflags;
    d.interrupts_enabled = (regs->rflags & kRflagsIf) != 0;
    d.cr0 = sregs->cr0;
    d.cr3 = sregs->cr3;
    d.cr4 = sregs->cr4;
    d.efer = sregs->efer;
    d.cs = sregs->cs.selector;
    d.cpl = sregs->ss.dpl;  // AMD APM Vol. 2 4.9.1: SS.DPL is the CPL
    d.mp_state = mp_state_name(mp->mp_state);
    d.interrupt_shadow = events->interrupt.shadow != 0;
    d.injected_vector = events->interrupt.injected != 0 ? events->interrupt.nr : -1;
    d.exception = (events->exception.injected != 0 || events->exception.pending != 0) ? events->exception.nr : -1;
    d.nmi_pending = events->nmi.pending != 0;
    d.nmi_injected = events->nmi.injected != 0;
    d.nmi_masked = events->nmi.masked != 0;
    d.apic_isr = highest_vector(*lapic, kApicIsr);
    d.apic_irr = highest_vector(*lapic, kApicIrr);
    d.apic_tpr = apic_reg(*lapic, kApicTpr);
    d.apic_lvt_timer = apic_reg(*lapic, kApicLvtTimer);
    d.apic_timer_initial = apic_reg(*lapic, kApicTimerInitial);
    d.apic_timer_current = apic_reg(*lapic, kApicTimerCurrent);
    for (const auto& [index, value] : state.msrs) {
        if (index == kMsrTscDeadline) {
            d.tsc_deadline = value;
        }
    }
    return d;
}

Result<ChipDiagnosis> diagnose_chips(const VmState& state) {
    auto master = from_image<kvm_irqchip>(state.pic_master, "PIC master");
    auto slave = from_image<kvm_irqchip>(state.pic_slave, "PIC slave");
    auto ioapic = from_image<kvm_irqchip>(state.ioapic, "IOAPIC");
    auto pit = from_image<kvm_pit_state2>(state.pit2, "PIT");
    auto clock = from_image<kvm_clock_data>(state.clock, "kvmclock");
    if (const Error* e = first_error(master, slave, ioapic, pit, clock)) {
        return *e;
    }
    ChipDiagnosis d;
    d.pic_master = pic_of(*master);
    d.pic_slave = pic_of(*slave);
    const auto& io = ioapic->chip.ioapic;
    for (unsigned pin = 0; pin < KVM_IOAPIC_NUM_PINS; ++pin) {
        const auto& f = io.redirtbl[pin].fields;
        IoapicPin p{pin,         f.vector, f.mask != 0, f.trig_mode != 0, f.remote_irr != 0,
                    ((io.irr >> pin) & 1) != 0, f.dest_id};
        if (!p.masked || p.remote_irr || p.asserted) {
            d.ioapic.push_back(p);
        }
    }
    const auto& ch0 = pit->channels[0];
    d.pit_mode = ch0.mode;
    d.pit_count = ch0.count;
    d.pit_gate = ch0.gate != 0;
    d.clock_ns = clock->clock;
    return d;
}

Result<KvmStats> KvmStats::open(int fd) {
    const int stats = ::ioctl(fd, KVM_GET_STATS_FD, nullptr);
    if (stats < 0) {
        return sys_error("KVM_GET_STATS_FD");
    }
    UniqueFd owner(stats);
    kvm_stats_header header{};
    if (::pread(stats, &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
        return sys_error("reading the KVM stats header");
    }
    // The kernel's own numbers, still bounded: a descriptor is a few dozen
    // bytes and a vCPU has a few dozen of them.
    constexpr std::uint32_t kMaxDescriptors = 4096;
    constexpr std::uint32_t kMaxNameSize = 256;
    if (header.num_desc > kMaxDescriptors || header.name_size == 0 || header.name_size > kMaxNameSize) {
        return make_error("KVM stats: {} descriptors with names of {} bytes", header.num_desc, header.name_size);
    }
    const std::size_t desc_size = sizeof(kvm_stats_desc) + header.name_size;
    std::vector<std::uint8_t> raw_descs(desc_size * header.num_desc);
    if (::pread(stats, raw_descs.data(), raw_descs.size(), header.desc_offset) !=
        static_cast<ssize_t>(raw_descs.size())) {
        return sys_error("reading the KVM stats descriptors");
    }
    std::vector<Descriptor> descs;
    for (std::uint32_t i = 0; i < header.num_desc; ++i) {
        kvm_stats_desc desc{};
        const std::uint8_t* raw = raw_descs.data() + i * desc_size;
        std::memcpy(&desc, raw, sizeof desc);
        const std::uint32_t type = desc.flags & KVM_STATS_TYPE_MASK;
        if (desc.size != 1 || (type != KVM_STATS_TYPE_CUMULATIVE && type != KVM_STATS_TYPE_INSTANT)) {
            continue;  // histograms and peaks
        }
        const char* name = reinterpret_cast<const char*>(raw + sizeof(kvm_stats_desc));
        descs.push_back({std::string(name, ::strnlen(name, header.name_size)), header.data_offset + desc.offset});
    }
    return KvmStats(std::move(owner), std::move(descs));
}

Result<KvmStats::Counters> KvmStats::read() const {
    Counters out;
    out.reserve(descs_.size());
    for (const auto& desc : descs_) {
        std::uint64_t value = 0;
        if (::pread(fd_.get(), &value, sizeof value, static_cast<off_t>(desc.offset)) != sizeof value) {
            return sys_error("reading the KVM stat {}", desc.name);
        }
        out.emplace_back(desc.name, value);
    }
    return out;
}

}  // namespace sbx::kvm

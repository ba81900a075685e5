// vCPU ioctls and exit decoding (Documentation/virt/kvm/api.rst 4.10 KVM_RUN, 5 kvm_run).
#include "vmm/kvm/linux_kvm.hpp"
#include <sys/ioctl.h>

#include <cstring>

#include "vmm/kvm/kvm.hpp"
#include "vmm/kvm/x86_gdt.hpp"

namespace sbx::kvm {

namespace {

kvm_run* run_page(const MmapRegion& region) { return reinterpret_cast<kvm_run*>(region.data()); }

VcpuExit decode_io(kvm_run* run) {
    auto* base = reinterpret_cast<std::uint8_t*>(run) + run->io.data_offset;
    std::size_t len = static_cast<std::size_t>(run->io.size) * run->io.count;
    if (run->io.direction == KVM_EXIT_IO_OUT) {
        return IoOut{run->io.port, run->io.size, {base, len}};
    }
    return IoIn{run->io.port, run->io.size, {base, len}};
}

VcpuExit decode_system_event(const kvm_run* run) {
    switch (run->system_event.type) {
        case KVM_SYSTEM_EVENT_SHUTDOWN: return SystemEvent{SystemEvent::Kind::Shutdown};
        case KVM_SYSTEM_EVENT_RESET: return SystemEvent{SystemEvent::Kind::Reset};
        case KVM_SYSTEM_EVENT_CRASH: return SystemEvent{SystemEvent::Kind::Crash};
        default: return SystemEvent{SystemEvent::Kind::Other};
    }
}

// Hidden segment state matching a descriptor of x86::kBootGdt.
kvm_segment segment_from_gdt(std::uint64_t entry, std::uint16_t selector) {
    kvm_segment seg{};
    seg.base = ((entry >> 16) & 0xffffff) | (((entry >> 56) & 0xff) << 24);
    std::uint32_t limit = static_cast<std::uint32_t>((entry & 0xffff) | (((entry >> 48) & 0xf) << 16));
    seg.g = static_cast<std::uint8_t>((entry >> 55) & 1);
    seg.limit = seg.g != 0 ? (limit << 12) | 0xfff : limit;
    seg.selector = selector;
    seg.type = static_cast<std::uint8_t>((entry >> 40) & 0xf);
    seg.present = static_cast<std::uint8_t>((entry >> 47) & 1);
    seg.dpl = static_cast<std::uint8_t>((entry >> 45) & 3);
    seg.db = static_cast<std::uint8_t>((entry >> 54) & 1);
    seg.s = static_cast<std::uint8_t>((entry >> 44) & 1);
    seg.l = static_cast<std::uint8_t>((entry >> 53) & 1);
    seg.avl = static_cast<std::uint8_t>((entry >> 52) & 1);
    seg.unusable = seg.present == 0 ? 1 : 0;
    return seg;
}

// LAPIC register offsets and LVT delivery modes (Intel SDM Vol. 3A 10.5.1).
constexpr std::size_t kApicLvtLint0 = 0x350;
constexpr std::size_t kApicLvtLint1 = 0x360;
constexpr std::uint32_t kApicModeExtInt = 0x7;
constexpr std::uint32_t kApicModeNmi = 0x4;

std::uint32_t set_delivery_mode(std::uint32_t lvt, std::uint32_t mode) {
    return (lvt & ~0x700U) | (mode << 8);
}

}  // namespace

Result<VcpuExit> Vcpu::run() {
    if (::ioctl(fd_.get(), KVM_RUN, 0) < 0) {
        if (errno == EINTR || errno == EAGAIN) {
            set_immediate_exit(false);
            return VcpuExit{Interrupted{}};
        }
        return sys_error("KVM_RUN on vCPU {}", id_);
    }
    kvm_run* run = run_page(run_);
    switch (run->exit_reason) {
        case KVM_EXIT_IO: return decode_io(run);
        case KVM_EXIT_MMIO: {
            std::size_t len = std::min<std::size_t>(run->mmio.len, sizeof run->mmio.data);
            if (run->mmio.is_write != 0) {
                return VcpuExit{MmioWrite{run->mmio.phys_addr, {run->mmio.data, len}}};
            }
            return VcpuExit{MmioRead{run->mmio.phys_addr, {run->mmio.data, len}}};
        }
        case KVM_EXIT_HLT: return VcpuExit{Halt{}};
        case KVM_EXIT_SHUTDOWN: return VcpuExit{Shutdown{}};
        case KVM_EXIT_SYSTEM_EVENT: return decode_system_event(run);
        case KVM_EXIT_FAIL_ENTRY:
            return VcpuExit{FailEntry{run->fail_entry.hardware_entry_failure_reason}};
        case KVM_EXIT_INTERNAL_ERROR: return VcpuExit{InternalError{run->internal.suberror}};
        default: return VcpuExit{UnhandledExit{run->exit_reason}};
    }
}

void Vcpu::set_immediate_exit(bool on) {
    // Written by the stopping thread and cleared by the vCPU thread.
    __atomic_store_n(&run_page(run_)->immediate_exit, on ? 1 : 0, __ATOMIC_RELEASE);
}

Result<std::uint64_t> Vcpu::instruction_pointer() const {
    kvm_regs regs{};
    if (::ioctl(fd_.get(), KVM_GET_REGS, &regs) < 0) {
        return sys_error("KVM_GET_REGS");
    }
    return regs.rip;
}

Result<void> Vcpu::set_cpuid(std::span<const CpuidEntry> entries) const {
    std::vector<std::uint8_t> buf(sizeof(kvm_cpuid2) + entries.size() * sizeof(kvm_cpuid_entry2));
    auto* cpuid = reinterpret_cast<kvm_cpuid2*>(buf.data());
    cpuid->nent = static_cast<std::uint32_t>(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
        auto& e = cpuid->entries[i];
        e.function = entries[i].function;
        e.index = entries[i].index;
        e.flags = entries[i].flags;
        e.eax = entries[i].eax;
        e.ebx = entries[i].ebx;
        e.ecx = entries[i].ecx;
        e.edx = entries[i].edx;
    }
    if (::ioctl(fd_.get(), KVM_SET_CPUID2, cpuid) < 0) {
        return sys_error("KVM_SET_CPUID2 on vCPU {}", id_);
    }
    cpuid_set_.assign(entries.begin(), entries.end());
    return ok();
}

Result<void> Vcpu::set_msrs(std::span<const std::pair<std::uint32_t, std::uint64_t>> msrs) const {
    std::vector<std::uint8_t> buf(sizeof(kvm_msrs) + msrs.size() * sizeof(kvm_msr_entry));
    auto* list = reinterpret_cast<kvm_msrs*>(buf.data());
    list->nmsrs = static_cast<std::uint32_t>(msrs.size());
    for (std::size_t i = 0; i < msrs.size(); ++i) {
        list->entries[i].index = msrs[i].first;
        list->entries[i].data = msrs[i].second;
    }
    // KVM_SET_MSRS returns the number of MSRs it set; stopping short names the culprit.
    int set = ::ioctl(fd_.get(), KVM_SET_MSRS, list);
    if (set < 0) {
        return sys_error("KVM_SET_MSRS on vCPU {}", id_);
    }
    if (static_cast<std::size_t>(set) != msrs.size()) {
        return make_error("KVM_SET_MSRS on vCPU {}: MSR {:#x} was refused", id_,
                          msrs[static_cast<std::size_t>(set)].first);
    }
    return ok();
}

Result<void> Vcpu::setup_long_mode(const LongModeEntry& entry) const {
    kvm_sregs sregs{};
    if (::ioctl(fd_.get(), KVM_GET_SREGS, &sregs) < 0) {
        return sys_error("KVM_GET_SREGS");
    }
    sregs.gdt.base = entry.gdt_base;
    sregs.gdt.limit = entry.gdt_limit;
    sregs.idt.base = entry.idt_base;
    sregs.idt.limit = entry.idt_limit;
    sregs.cs = segment_from_gdt(x86::kBootGdt[1], x86::kBootCodeSelector);
    kvm_segment data = segment_from_gdt(x86::kBootGdt[2], x86::kBootDataSelector);
    sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = data;
    sregs.tr = segment_from_gdt(x86::kBootGdt[3], x86::kBootTssSelector);
    sregs.cr3 = entry.cr3;
    // Exactly the bits long mode needs: caches enabled (CD and NW clear).
    sregs.cr4 = x86::kCr4Pae;
    sregs.cr0 = x86::kCr0Pe | x86::kCr0Pg | x86::kCr0Et;
    sregs.efer = x86::kEferLme | x86::kEferLma;
    if (::ioctl(fd_.get(), KVM_SET_SREGS, &sregs) < 0) {
        return sys_error("KVM_SET_SREGS");
    }

    kvm_regs regs{};
    regs.rflags = 0x2;  // bit 1 is reserved and always set
    regs.rip = entry.rip;
    regs.rsi = entry.rsi;
    regs.rsp = entry.rsp;
    regs.rbp = entry.rsp;
    if (::ioctl(fd_.get(), KVM_SET_REGS, &regs) < 0) {
        return sys_error("KVM_SET_REGS");
    }

    kvm_fpu fpu{};
    fpu.fcw = 0x37f;     // x87 power-on control word
    fpu.mxcsr = 0x1f80;  // all SSE exceptions masked
    if (::ioctl(fd_.get(), KVM_SET_FPU, &fpu) < 0) {
        return sys_error("KVM_SET_FPU");
    }
    return ok();
}

Result<void> Vcpu::setup_lapic_lints() const {
    kvm_lapic_state lapic{};
    if (::ioctl(fd_.get(), KVM_GET_LAPIC, &lapic) < 0) {
        return sys_error("KVM_GET_LAPIC");
    }
    auto patch = [&](std::size_t offset, std::uint32_t mode) {
        std::uint32_t value = 0;
        std::memcpy(&value, lapic.regs + offset, sizeof value);
        value = set_delivery_mode(value, mode);
        std::memcpy(lapic.regs + offset, &value, sizeof value);
    };
    // Virtual wire mode: the PIC's INTR on LINT0, NMIs on LINT1 (MP spec 3.6.2.2).
    patch(kApicLvtLint0, kApicModeExtInt);
    patch(kApicLvtLint1, kApicModeNmi);
    if (::ioctl(fd_.get(), KVM_SET_LAPIC, &lapic) < 0) {
        return sys_error("KVM_SET_LAPIC");
    }
    return ok();
}

std::string describe(const VcpuExit& exit) {
    struct Visitor {
        std::string operator()(const IoIn& e) const { return fmt::format("io in port {:#x}", e.port); }
        std::string operator()(const IoOut& e) const { return fmt::format("io out port {:#x}", e.port); }
        std::string operator()(const MmioRead& e) const { return fmt::format("mmio read {:#x}", e.address); }
        std::string operator()(const MmioWrite& e) const { return fmt::format("mmio write {:#x}", e.address); }
        std::string operator()(const Halt&) const { return "hlt"; }
        std::string operator()(const Shutdown&) const { return "shutdown (triple fault)"; }
        std::string operator()(const SystemEvent& e) const {
            return fmt::format("system event {}", static_cast<int>(e.kind));
        }
        std::string operator()(const Interrupted&) const { return "interrupted"; }
        std::string operator()(const FailEntry& e) const {
            return fmt::format("entry failed, hardware reason {:#x}", e.reason);
        }
        std::string operator()(const InternalError& e) const {
            return fmt::format("KVM internal error, suberror {}", e.suberror);
        }
        std::string operator()(const UnhandledExit& e) const {
            return fmt::format("unhandled exit reason {}", e.reason);
        }
    };
    return std::visit(Visitor{}, exit);
}

}  // namespace sbx::kvm

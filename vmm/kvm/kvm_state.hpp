// Saved KVM state of a vCPU and of a VM, for snapshots. Plain data: kernel
// structures are kept as their exact byte images (this header does not see
// <linux/kvm.h>); decode() checks every image's size against the structure
// it must be, so a corrupt snapshot is an Error before any ioctl sees it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/byte_codec.hpp"
#include "base/result.hpp"
#include "vmm/kvm/cpuid.hpp"

namespace sbx::kvm {

struct VcpuState {
    static constexpr std::uint16_t kVersion = 1;
    static constexpr std::size_t kMaxCpuidEntries = 256;
    static constexpr std::size_t kMaxMsrs = 1024;
    static constexpr std::size_t kMaxXsaveBytes = 1 << 20;

    std::vector<CpuidEntry> cpuid;  // as given to KVM_SET_CPUID2 (Vcpu::set_cpuid)
    // Images of kvm_regs, kvm_sregs, kvm_xsave (KVM_GET_XSAVE2's size, at
    // least 4096 bytes), kvm_xcrs, kvm_debugregs, kvm_lapic_state,
    // kvm_vcpu_events and kvm_mp_state.
    std::vector<std::uint8_t> regs, sregs, xsave, xcrs, debugregs, lapic, events, mp_state;
    std::vector<std::pair<std::uint32_t, std::uint64_t>> msrs;  // index, value
    // KVM_GET_TSC_KHZ at save time (0: unknown). On restore, KVM_SET_TSC_KHZ
    // when the host differs and supports TSC scaling.
    std::uint32_t tsc_khz = 0;

    void encode(ByteWriter& w) const;
    static Result<VcpuState> decode(ByteReader& r);
};

struct VmState {
    static constexpr std::uint16_t kVersion = 1;

    // Images of kvm_irqchip for chip ids 0 (PIC master), 1 (PIC slave) and
    // 2 (IOAPIC), kvm_pit_state2 and kvm_clock_data.
    std::vector<std::uint8_t> pic_master, pic_slave, ioapic, pit2, clock;

    void encode(ByteWriter& w) const;
    static Result<VmState> decode(ByteReader& r);
};

// How Vm::restore_state sets kvmclock (api.rst 4.30 KVM_SET_CLOCK).
enum class ClockRestore {
    // The guest's clock continues from the saved value, as if no time passed
    // while the snapshot was on disk (its timers neither fire nor jump).
    Continue,
    // The guest's clock advances by the host real time elapsed since the
    // save, so its wall clock is the host's again: KVM_CLOCK_REALTIME when
    // this host's KVM takes it, else the VMM adds the elapsed time itself.
    // The saved image always pairs the clock with a real time (KVM's, or
    // CLOCK_REALTIME read right after KVM_GET_CLOCK).
    AdvanceByRealtime,
};

}  // namespace sbx::kvm

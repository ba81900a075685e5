// Where a stuck guest is: each vCPU's position and pending events, its
// local APIC, the VM's interrupt chips and KVM's own counters, decoded
// from saved state (kvm_state.hpp) into plain fields a supervisor or a test
// can print. Read-only: nothing here changes the VM.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "base/unique_fd.hpp"
#include "vmm/kvm/kvm_state.hpp"

namespace sbx::kvm {

struct VcpuDiagnosis {
    std::uint32_t id = 0;
    std::uint64_t rip = 0, rsp = 0, rflags = 0, cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
    std::uint16_t cs = 0;
    std::uint8_t cpl = 0;
    // KVM_GET_MP_STATE (api.rst 4.38): runnable, uninitialized,
    // init_received, halted, sipi_received, stopped, check_stop, ...
    std::string mp_state;
    bool interrupts_enabled = false;  // RFLAGS.IF
    bool interrupt_shadow = false;    // STI / MOV SS blocking (kvm_vcpu_events.interrupt.shadow)
    int injected_vector = -1;         // an interrupt being injected (-1: none)
    int exception = -1;               // a pending or injected exception vector (-1: none)
    bool nmi_pending = false, nmi_injected = false, nmi_masked = false;
    // Local APIC (Intel SDM Vol. 3A 11.8.4): highest vector in service and
    // requested (-1: none), TPR, the timer LVT, initial and current count,
    // and IA32_TSC_DEADLINE (MSR 0x6e0) for the TSC-deadline mode.
    int apic_isr = -1, apic_irr = -1;
    std::uint32_t apic_tpr = 0, apic_lvt_timer = 0, apic_timer_initial = 0, apic_timer_current = 0;
    std::uint64_t tsc_deadline = 0;
};

// One IOAPIC redirection entry (82093AA datasheet, 3.2.4) with its pin's
// input state.
struct IoapicPin {
    unsigned pin = 0;
    std::uint8_t vector = 0;
    bool masked = true, level_triggered = false, remote_irr = false, asserted = false;
    std::uint8_t destination = 0;
};

struct PicDiagnosis {
    std::uint8_t irr = 0, isr = 0, imr = 0;
};

struct ChipDiagnosis {
    PicDiagnosis pic_master, pic_slave;
    std::vector<IoapicPin> ioapic;  // unmasked pins and pins with input or remote IRR set
    // PIT channel 0 (Intel 8254 datasheet): mode, reload count, gate.
    std::uint8_t pit_mode = 0;
    std::uint32_t pit_count = 0;
    bool pit_gate = false;
    std::uint64_t clock_ns = 0;  // kvmclock (KVM_GET_CLOCK)
};

[[nodiscard]] Result<VcpuDiagnosis> diagnose_vcpu(std::uint32_t id, const VcpuState& state);
[[nodiscard]] Result<ChipDiagnosis> diagnose_chips(const VmState& state);

// KVM's binary statistics of one vCPU or of the VM (api.rst 4.133
// KVM_GET_STATS_FD): each cumulative or instant counter of one element, by
// name (exits, irq_injections, halt_exits, ...). Open it before the vCPU
// runs: the ioctl takes the vCPU's mutex, which KVM_RUN holds, while
// reading the stats fd takes nothing, so a vCPU stuck in KVM_RUN can still
// be read.
class KvmStats {
public:
    using Counters = std::vector<std::pair<std::string, std::uint64_t>>;

    // `fd` is a vCPU or VM fd.
    [[nodiscard]] static Result<KvmStats> open(int fd);
    [[nodiscard]] Result<Counters> read() const;

private:
    struct Descriptor {
        std::string name;
        std::uint64_t offset = 0;  // of the value in the file
    };
    KvmStats(UniqueFd fd, std::vector<Descriptor> descs) : fd_(std::move(fd)), descs_(std::move(descs)) {}
    UniqueFd fd_;
    std::vector<Descriptor> descs_;
};

}  // namespace sbx::kvm

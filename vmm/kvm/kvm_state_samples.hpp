// For tests: saved KVM state that every decoder accepts (images of the
// kernel structures' sizes, irqchip images with their chip ids), in
// the KVM layer because only it may see <linux/kvm.h>.
#pragma once

#include <cstring>

#include "vmm/kvm/kvm_state.hpp"
#include "vmm/kvm/linux_kvm.hpp"

namespace sbx::kvm::testing {

inline std::vector<std::uint8_t> pattern(std::size_t size, std::uint8_t seed) {
    std::vector<std::uint8_t> out(size);
    for (std::size_t i = 0; i < size; ++i) {
        out[i] = static_cast<std::uint8_t>(seed + i * 7);
    }
    return out;
}

// One vCPU; `seed` varies the register images.
inline VcpuState sample_vcpu_state(std::uint8_t seed = 1) {
    VcpuState s;
    s.cpuid = {{0, 0, 0, 0xd, 0x68747541, 0x444d4163, 0x69746e65},
               {7, 1, 1, 0x10, 0, 0, 0},
               {0x80000001, 0, 0, 0, 0, 0x1, 0x2}};
    s.regs = pattern(sizeof(kvm_regs), seed);
    s.sregs = pattern(sizeof(kvm_sregs), seed + 1);
    s.xsave = pattern(sizeof(kvm_xsave) + 64, seed + 2);
    kvm_xcrs xcrs{};
    xcrs.nr_xcrs = 1;  // decode refuses more than KVM_MAX_XCRS
    xcrs.xcrs[0].value = 7;
    s.xcrs.resize(sizeof xcrs);
    std::memcpy(s.xcrs.data(), &xcrs, sizeof xcrs);
    s.debugregs = pattern(sizeof(kvm_debugregs), seed + 3);
    s.lapic = pattern(sizeof(kvm_lapic_state), seed + 4);
    s.events = pattern(sizeof(kvm_vcpu_events), seed + 5);
    s.mp_state = {0, 0, 0, 0};
    s.msrs = {{0x10, 123456789}, {0xc0000082, 0xffffffff81000000ULL}, {0x4b564d01, 0x1001}};
    s.tsc_khz = 2445434;
    return s;
}

// The VM-wide chips and clock; `seed` varies the PIT and clock images.
inline VmState sample_vm_state(std::uint8_t seed = 9) {
    VmState s;
    std::vector<std::uint8_t>* chips[] = {&s.pic_master, &s.pic_slave, &s.ioapic};
    for (std::uint32_t id = 0; id < 3; ++id) {
        kvm_irqchip chip{};
        chip.chip_id = id;
        chip.chip.pic.irq_base = static_cast<std::uint8_t>(0x20 + 8 * id);
        chips[id]->resize(sizeof chip);
        std::memcpy(chips[id]->data(), &chip, sizeof chip);
    }
    s.pit2 = pattern(sizeof(kvm_pit_state2), seed);
    s.clock = pattern(sizeof(kvm_clock_data), seed + 1);
    return s;
}

}  // namespace sbx::kvm::testing

// The diagnosis decoded from a real /dev/kvm vCPU and VM: the fields match
// what the vCPU was given, and KVM's counters read back by name. Skips
// (exit 77 through the runner) when this host has no usable /dev/kvm.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "vmm/kvm/diagnosis.hpp"
#include "vmm/kvm/hw_test_util.hpp"
#include "vmm/kvm/kvm.hpp"

using namespace sbx;
using namespace sbx::kvm;

namespace {

constexpr std::uint64_t kTssAddress = 0xfffbd000;

bool has(const std::vector<std::pair<std::string, std::uint64_t>>& stats, const std::string& name) {
    return std::any_of(stats.begin(), stats.end(), [&](const auto& s) { return s.first == name; });
}

}  // namespace

TEST_CASE("a vCPU at a 64-bit kernel entry is diagnosed as set up") {
    auto sys = System::open();
    if (!sys) {
        std::fprintf(stderr, "SKIP: no usable /dev/kvm: %s\n", sys.error().message.c_str());
        std::exit(77);
    }
    auto vm = sys->create_vm();
    REQUIRE_MESSAGE(vm, vm.error().message);
    REQUIRE(vm->set_tss_address(kTssAddress));
    REQUIRE(vm->create_irqchip());
    REQUIRE(vm->create_pit());
    auto vcpu = vm->create_vcpu(0, sys->vcpu_mmap_size());
    REQUIRE_MESSAGE(vcpu, vcpu.error().message);
    testing::boot_vcpu(*sys, *vcpu);

    auto state = vcpu->save_state();
    REQUIRE_MESSAGE(state, state.error().message);
    auto d = diagnose_vcpu(0, *state);
    REQUIRE_MESSAGE(d, d.error().message);
    CHECK(d->rip == 0x1000200);
    CHECK(d->rsp == 0x8ff0);
    CHECK(d->cr3 == 0x9000);
    CHECK(d->cs == x86::kBootCodeSelector);
    CHECK(d->rip == testing::test_entry().rip);
    CHECK(d->cpl == 0);
    CHECK(d->mp_state == "runnable");
    CHECK_FALSE(d->interrupts_enabled);
    CHECK(d->injected_vector == -1);
    CHECK(d->exception == -1);
    CHECK(d->apic_isr == -1);
    CHECK(d->apic_irr == -1);

    auto vm_state = vm->save_state();
    REQUIRE_MESSAGE(vm_state, vm_state.error().message);
    auto chips = diagnose_chips(*vm_state);
    REQUIRE_MESSAGE(chips, chips.error().message);
    CHECK(chips->ioapic.empty());  // every pin masked at reset (82093AA 3.2.4)
    CHECK(chips->pic_master.imr == 0);

    auto vcpu_stats = KvmStats::open(vcpu->fd());
    REQUIRE_MESSAGE(vcpu_stats, vcpu_stats.error().message);
    auto stats = vcpu_stats->read();
    REQUIRE_MESSAGE(stats, stats.error().message);
    CHECK(has(*stats, "exits"));
    CHECK(has(*stats, "irq_injections"));
    auto vm_stats = KvmStats::open(vm->fd());
    REQUIRE_MESSAGE(vm_stats, vm_stats.error().message);
    auto vm_counters = vm_stats->read();
    REQUIRE_MESSAGE(vm_counters, vm_counters.error().message);
    CHECK_FALSE(vm_counters->empty());
}

TEST_CASE("a truncated state is refused, not read past") {
    VcpuState s;
    s.regs.resize(3);
    CHECK_FALSE(diagnose_vcpu(0, s));
    VmState v;
    CHECK_FALSE(diagnose_chips(v));
}

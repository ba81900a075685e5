// vCPU and VM state through a real /dev/kvm: save, encode, decode, restore
// into a second VM, save again, compare. Exits 77 (meson: SKIP) when this
// host has no usable /dev/kvm.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "vmm/kvm/hw_test_util.hpp"
#include "vmm/kvm/kvm.hpp"
#include "vmm/kvm/linux_kvm.hpp"
#include "vmm/kvm/x86_cpu.hpp"
#include "vmm/kvm/x86_gdt.hpp"

using namespace sbx;
using namespace sbx::kvm;

namespace {

constexpr std::uint32_t kMsrTsc = 0x10;
constexpr std::uint32_t kMsrHvVpRuntime = 0x40000010;
constexpr std::uint32_t kMsrHvTimeRefCount = 0x40000020;
constexpr std::uint32_t kMsrLstar = 0xc0000082;
constexpr std::uint32_t kMsrKernelGsBase = 0xc0000102;
constexpr std::uint32_t kMsrPat = 0x277;
constexpr std::uint32_t kMsrMtrrDefType = 0x2ff;
constexpr std::uint32_t kMsrMtrrPhysBase0 = 0x200;
constexpr std::uint64_t kTssAddress = 0xfffbd000;

std::optional<System> open_kvm() {
    auto sys = System::open();
    if (!sys) {
        std::fprintf(stderr, "SKIP: no usable /dev/kvm: %s\n", sys.error().message.c_str());
        std::exit(77);
    }
    return std::move(*sys);
}

Vm make_vm(const System& sys) {
    auto vm = sys.create_vm();
    REQUIRE_MESSAGE(vm, vm.error().message);
    REQUIRE(vm->set_tss_address(kTssAddress));
    REQUIRE(vm->create_irqchip());
    REQUIRE(vm->create_pit());
    return std::move(*vm);
}

Vcpu make_vcpu(const System& sys, const Vm& vm) {
    auto vcpu = vm.create_vcpu(0, sys.vcpu_mmap_size());
    REQUIRE_MESSAGE(vcpu, vcpu.error().message);
    return std::move(*vcpu);
}

// A vCPU at a 64-bit kernel entry, plus MSR values that differ from reset.
// The TSC is put far from 0: KVM takes a host-initiated TSC write within
// one second of the VM's expected TSC as a request to synchronize with the
// other vCPUs and keeps its own value (kvm_synchronize_tsc), which a guest
// that ran for more than a second never meets.
void boot_setup(const System& sys, const Vcpu& vcpu) {
    testing::boot_vcpu(sys, vcpu,
                       {{kMsrTsc, 1ULL << 40},
                        {kMsrLstar, 0xffffffff81a00040ULL},
                        {kMsrKernelGsBase, 0xffff888003c00000ULL},
                        {kMsrPat, 0x0007040600070406ULL},
                        {kMsrMtrrPhysBase0, 0x80000006ULL}});
}

std::map<std::uint32_t, std::uint64_t> msr_map(const VcpuState& s) {
    std::map<std::uint32_t, std::uint64_t> out;
    for (auto [index, value] : s.msrs) {
        out[index] = value;
    }
    return out;
}

template <typename State>
State through_codec(const State& s) {
    ByteWriter w;
    s.encode(w);
    auto bytes = w.take();
    ByteReader r(bytes);
    auto back = State::decode(r);
    REQUIRE_MESSAGE(back, back.error().message);
    REQUIRE(r.finish("state"));
    return std::move(*back);
}

}  // namespace

TEST_CASE("vCPU state survives save, encode, decode and restore into another VM") {
    auto sys = open_kvm();
    if (!sys) {
        return;
    }
    Vm vm1 = make_vm(*sys);
    Vcpu cpu1 = make_vcpu(*sys, vm1);
    boot_setup(*sys, cpu1);

    auto saved = cpu1.save_state();
    REQUIRE_MESSAGE(saved, saved.error().message);
    CHECK_FALSE(saved->cpuid.empty());
    CHECK(saved->tsc_khz > 0);
    auto msrs1 = msr_map(*saved);
    CHECK(msrs1[kMsrLstar] == 0xffffffff81a00040ULL);
    CHECK(msrs1[kMsrKernelGsBase] == 0xffff888003c00000ULL);
    CHECK(msrs1[kMsrPat] == 0x0007040600070406ULL);
    CHECK(msrs1[kMsrMtrrDefType] == ((1ULL << 11) | 6));
    CHECK(msrs1[kMsrMtrrPhysBase0] == 0x80000006ULL);
    CHECK(msrs1.count(kMsrTsc) == 1);
    CHECK(msrs1.count(0x4b564d01) == 1);  // kvmclock MSR_KVM_SYSTEM_TIME_NEW

    // The guest CPUID the VM builder makes passes the snapshot CPU check here.
    auto supported = sys->supported_cpuid();
    REQUIRE(supported);
    auto compatible = check_cpuid_compatible(saved->cpuid, *supported);
    CHECK_MESSAGE(compatible, (compatible ? "" : compatible.error().message));

    VcpuState decoded = through_codec(*saved);

    Vm vm2 = make_vm(*sys);
    Vcpu cpu2 = make_vcpu(*sys, vm2);
    auto restored = cpu2.restore_state(decoded);
    REQUIRE_MESSAGE(restored, (restored ? "" : restored.error().message));

    auto again = cpu2.save_state();
    REQUIRE_MESSAGE(again, again.error().message);
    CHECK(again->regs == saved->regs);
    CHECK(again->sregs == saved->sregs);
    CHECK(again->xcrs == saved->xcrs);
    CHECK(again->debugregs == saved->debugregs);
    CHECK(again->lapic == saved->lapic);
    CHECK(again->mp_state == saved->mp_state);
    CHECK(again->events == saved->events);
    CHECK(again->xsave == saved->xsave);
    CHECK(again->cpuid == saved->cpuid);
    auto msrs2 = msr_map(*again);
    CHECK(msrs2[kMsrTsc] >= msrs1[kMsrTsc]);  // the TSC kept counting
    // Clocks: the TSC, and Hyper-V's partition reference counter and VP
    // runtime (TLFS 12.4, 12.1.4), which a KVM that emulates Hyper-V lists.
    for (std::uint32_t clock : {kMsrTsc, kMsrHvVpRuntime, kMsrHvTimeRefCount}) {
        msrs1.erase(clock);
        msrs2.erase(clock);
    }
    for (const auto& msr : msrs1) {
        CAPTURE(msr.first);
        CHECK(msrs2.count(msr.first) == 1);
        CHECK(msrs2[msr.first] == msr.second);
    }
    CHECK(msrs2.size() == msrs1.size());

    CHECK(cpu1.notify_paused());  // no kvmclock in use: EINVAL, not an error
}

TEST_CASE("restore_state names an MSR KVM refuses") {
    auto sys = open_kvm();
    if (!sys) {
        return;
    }
    Vm vm1 = make_vm(*sys);
    Vcpu cpu1 = make_vcpu(*sys, vm1);
    boot_setup(*sys, cpu1);
    auto saved = cpu1.save_state();
    REQUIRE(saved);
    saved->msrs.emplace_back(0x0badf00d, 1);
    Vm vm2 = make_vm(*sys);
    Vcpu cpu2 = make_vcpu(*sys, vm2);
    auto r = cpu2.restore_state(*saved);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("0xbadf00d") != std::string::npos);
}

TEST_CASE("VM state survives save, encode, decode and restore into another VM") {
    auto sys = open_kvm();
    if (!sys) {
        return;
    }
    Vm vm1 = make_vm(*sys);
    Vcpu cpu1 = make_vcpu(*sys, vm1);
    REQUIRE(vm1.set_irq_line(4, true));  // an edge on the PIC and IOAPIC
    REQUIRE(vm1.set_irq_line(4, false));

    auto saved = vm1.save_state();
    REQUIRE_MESSAGE(saved, saved.error().message);
    VmState decoded = through_codec(*saved);

    Vm vm2 = make_vm(*sys);
    Vcpu cpu2 = make_vcpu(*sys, vm2);
    auto restored = vm2.restore_state(decoded);
    REQUIRE_MESSAGE(restored, (restored ? "" : restored.error().message));
    auto again = vm2.save_state();
    REQUIRE(again);
    CHECK(again->pic_master == saved->pic_master);
    CHECK(again->pic_slave == saved->pic_slave);
    CHECK(again->ioapic == saved->ioapic);

    kvm_clock_data before{}, after{};
    std::memcpy(&before, saved->clock.data(), sizeof before);
    std::memcpy(&after, again->clock.data(), sizeof after);
    CHECK(after.clock >= before.clock);
    // Continue: the clock resumes from the saved value, not from vm2's own.
    CHECK(after.clock - before.clock < 5'000'000'000ULL);

    kvm_pit_state2 pit_before{}, pit_after{};
    std::memcpy(&pit_before, saved->pit2.data(), sizeof pit_before);
    std::memcpy(&pit_after, again->pit2.data(), sizeof pit_after);
    for (int ch = 0; ch < 3; ++ch) {
        CHECK(pit_after.channels[ch].mode == pit_before.channels[ch].mode);
        CHECK(pit_after.channels[ch].count == pit_before.channels[ch].count);
    }

    CHECK(vm2.restore_state(decoded, ClockRestore::AdvanceByRealtime));
}

TEST_CASE("a restore that advances by real time moves kvmclock and the TSC on by the time since the save") {
    auto sys = open_kvm();
    if (!sys) {
        return;
    }
    Vm vm1 = make_vm(*sys);
    Vcpu cpu1 = make_vcpu(*sys, vm1);
    boot_setup(*sys, cpu1);
    auto saved_vcpu = cpu1.save_state();
    auto saved = vm1.save_state();
    REQUIRE(saved_vcpu);
    REQUIRE(saved);
    kvm_clock_data clock{};
    std::memcpy(&clock, saved->clock.data(), sizeof clock);
    REQUIRE((clock.flags & KVM_CLOCK_REALTIME) != 0);  // paired by KVM or by save_state
    // As if the snapshot had been on disk for 30 s.
    constexpr std::uint64_t kOnDisk = 30'000'000'000ULL;
    clock.realtime -= kOnDisk;
    std::memcpy(saved->clock.data(), &clock, sizeof clock);

    Vm vm2 = make_vm(*sys);
    Vcpu cpu2 = make_vcpu(*sys, vm2);
    auto advanced = vm2.restore_state(*saved, ClockRestore::AdvanceByRealtime);
    REQUIRE_MESSAGE(advanced, (advanced ? "" : advanced.error().message));
    CHECK(*advanced >= kOnDisk);
    CHECK(*advanced < kOnDisk + 5'000'000'000ULL);
    auto again = vm2.save_state();
    REQUIRE(again);
    kvm_clock_data after{};
    std::memcpy(&after, again->clock.data(), sizeof after);
    CHECK(after.clock >= clock.clock + kOnDisk);
    CHECK(after.clock < clock.clock + kOnDisk + 5'000'000'000ULL);

    REQUIRE(cpu2.restore_state(*saved_vcpu, *advanced));
    auto vcpu_again = cpu2.save_state();
    REQUIRE(vcpu_again);
    const std::uint64_t tsc_before = msr_map(*saved_vcpu)[kMsrTsc];
    const std::uint64_t tsc_after = msr_map(*vcpu_again)[kMsrTsc];
    const std::uint64_t ticks = *advanced / 1'000'000 * saved_vcpu->tsc_khz;  // ms x kHz
    const std::uint64_t five_seconds = 5ULL * 1000 * saved_vcpu->tsc_khz;
    if (tsc_after < tsc_before + five_seconds) {
        // PVM (this machine's /dev/kvm) runs every guest on the host's TSC
        // and ignores TSC writes; KVM proper takes them (the guest tests).
        MESSAGE("this KVM ignores guest TSC writes: the TSC advance is not checked here");
    } else {
        CHECK(tsc_after >= tsc_before + ticks);
        CHECK(tsc_after < tsc_before + ticks + five_seconds);
    }

    // Continue: the saved value, however long ago it was saved.
    Vm vm3 = make_vm(*sys);
    auto continued = vm3.restore_state(*saved);
    REQUIRE(continued);
    CHECK(*continued == 0);
}

namespace {

constexpr std::size_t kGuestMemory = 2 << 20;
constexpr std::uint64_t kCodeAddress = 0x1000;
constexpr std::uint64_t kGdtAddress = 0x500;
constexpr std::uint64_t kPml4 = 0x9000, kPdpt = 0xa000, kPd = 0xb000;
constexpr std::uint16_t kCounterPort = 0x10;

void put64(std::uint8_t* mem, std::uint64_t at, std::uint64_t v) {
    std::memcpy(mem + at, &v, sizeof v);
}

// Identity-mapped first 2 MiB, the boot GDT, and a loop that counts in eax
// and writes al to port 0x10 each time round: inc eax; out 0x10, al; jmp loop.
void load_counter_guest(std::uint8_t* mem) {
    put64(mem, kPml4, kPdpt | 0x3);
    put64(mem, kPdpt, kPd | 0x3);
    put64(mem, kPd, 0x83);  // 2 MiB page at 0, present, writable
    for (std::size_t i = 0; i < x86::kBootGdt.size(); ++i) {
        put64(mem, kGdtAddress + 8 * i, x86::kBootGdt[i]);
    }
    const std::array<std::uint8_t, 6> code = {0xff, 0xc0, 0xe6, kCounterPort, 0xeb, 0xfa};
    std::memcpy(mem + kCodeAddress, code.data(), code.size());
}

// Runs until the next counter write and returns its value.
std::optional<std::uint8_t> next_count(Vcpu& vcpu) {
    for (int i = 0; i < 100; ++i) {
        auto exit = vcpu.run();
        REQUIRE_MESSAGE(exit, exit.error().message);
        if (const auto* out = std::get_if<IoOut>(&*exit); out != nullptr && out->port == kCounterPort) {
            return out->data[0];
        }
        if (!std::holds_alternative<Interrupted>(*exit)) {
            MESSAGE("unexpected exit: " << describe(*exit));
            return std::nullopt;
        }
    }
    return std::nullopt;
}

}  // namespace

TEST_CASE("a running guest continues in another VM from its saved state") {
    auto sys = open_kvm();
    if (!sys) {
        return;
    }
    auto mem1 = MmapRegion::anonymous(kGuestMemory);
    REQUIRE(mem1);
    load_counter_guest(mem1->data());
    Vm vm1 = make_vm(*sys);
    REQUIRE(vm1.set_user_memory_region(0, 0, kGuestMemory, mem1->data()));
    Vcpu cpu1 = make_vcpu(*sys, vm1);
    boot_setup(*sys, cpu1);
    LongModeEntry entry;
    entry.rip = kCodeAddress;
    entry.rsp = 0x8000;
    entry.cr3 = kPml4;
    entry.gdt_base = kGdtAddress;
    entry.gdt_limit = static_cast<std::uint16_t>(sizeof(x86::kBootGdt) - 1);
    REQUIRE(cpu1.setup_long_mode(entry));

    for (std::uint8_t want = 1; want <= 3; ++want) {
        auto got = next_count(cpu1);
        REQUIRE(got);
        CHECK(*got == want);
    }
    // Pause as the VMM does: an immediate exit completes the pending OUT
    // (api.rst 5, kvm_run immediate_exit), then save.
    cpu1.set_immediate_exit(true);
    auto paused = cpu1.run();
    REQUIRE(paused);
    REQUIRE(std::holds_alternative<Interrupted>(*paused));
    auto vcpu_state = cpu1.save_state();
    REQUIRE_MESSAGE(vcpu_state, vcpu_state.error().message);
    auto vm_state = vm1.save_state();
    REQUIRE_MESSAGE(vm_state, vm_state.error().message);

    auto mem2 = MmapRegion::anonymous(kGuestMemory);
    REQUIRE(mem2);
    std::memcpy(mem2->data(), mem1->data(), kGuestMemory);
    Vm vm2 = make_vm(*sys);
    REQUIRE(vm2.set_user_memory_region(0, 0, kGuestMemory, mem2->data()));
    Vcpu cpu2 = make_vcpu(*sys, vm2);
    REQUIRE(vm2.restore_state(through_codec(*vm_state)));
    auto restored = cpu2.restore_state(through_codec(*vcpu_state));
    REQUIRE_MESSAGE(restored, (restored ? "" : restored.error().message));

    auto got = next_count(cpu2);
    REQUIRE(got);
    CHECK(*got == 4);
    // The original goes on independently from the same point.
    auto original = next_count(cpu1);
    REQUIRE(original);
    CHECK(*original == 4);
}

#include <doctest/doctest.h>

#include <cstring>

#include "snapshot/machine_codec.hpp"
#include "vmm/kvm/kvm_state_samples.hpp"

using namespace sbx;
using namespace sbx::snapshot;

namespace {

VmConfig sample_config() {
    VmConfig config;
    config.kernel = "/images/vmlinux";
    config.initrd = "/images/minimal.cpio.gz";
    config.cmdline = "console=ttyS0 sbx.token=abc";
    config.cpus = 2;
    config.memory_mib = 512;
    config.disks = {{"/disks/root.ext4", false}, {"/disks/data.ext4", true}};
    config.net = NetConfig{"tap0", "02:00:00:00:00:01"};
    config.vsock = VsockConfig{3, "/run/v.sock"};
    config.rng = true;
    config.console.kind = ConsoleConfig::Kind::None;  // host-side: not saved
    return config;
}

// A machine every decoder accepts: images of the right sizes, irqchip
// images with their chip ids, device states within their limits.
MachineState sample_machine() {
    MachineState m;
    m.vcpus = {kvm::testing::sample_vcpu_state(1), kvm::testing::sample_vcpu_state(40)};
    m.vm = kvm::testing::sample_vm_state(90);
    m.serial.ier = 0x03;
    m.serial.lcr = 0x03;
    m.serial.mcr = 0x0b;
    m.serial.lsr = 0x60;
    m.serial.dll = 0x01;
    m.serial.fifo_enabled = true;
    m.serial.thr_interrupt_pending = true;
    m.serial.rx_fifo = "ls\n";
    m.i8042.control = 0x47;
    m.i8042.output = {0xfa, 0xaa};
    m.virtio = {{1, 2, 3}, {}, std::vector<std::uint8_t>(300, 0x5a)};
    return m;
}

bool equal(const kvm::VcpuState& a, const kvm::VcpuState& b) {
    return a.cpuid == b.cpuid && a.regs == b.regs && a.sregs == b.sregs && a.xsave == b.xsave &&
           a.xcrs == b.xcrs && a.debugregs == b.debugregs && a.lapic == b.lapic && a.events == b.events &&
           a.mp_state == b.mp_state && a.msrs == b.msrs && a.tsc_khz == b.tsc_khz;
}

bool equal(const MachineState& a, const MachineState& b) {
    if (a.vcpus.size() != b.vcpus.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.vcpus.size(); ++i) {
        if (!equal(a.vcpus[i], b.vcpus[i])) {
            return false;
        }
    }
    const auto& sa = a.serial;
    const auto& sb = b.serial;
    return a.vm.pic_master == b.vm.pic_master && a.vm.pic_slave == b.vm.pic_slave && a.vm.ioapic == b.vm.ioapic &&
           a.vm.pit2 == b.vm.pit2 && a.vm.clock == b.vm.clock && sa.ier == sb.ier && sa.lcr == sb.lcr &&
           sa.mcr == sb.mcr && sa.lsr == sb.lsr && sa.msr == sb.msr && sa.scr == sb.scr && sa.dll == sb.dll &&
           sa.dlm == sb.dlm && sa.fifo_enabled == sb.fifo_enabled &&
           sa.thr_interrupt_pending == sb.thr_interrupt_pending && sa.rx_fifo == sb.rx_fifo &&
           a.i8042.status == b.i8042.status && a.i8042.control == b.i8042.control &&
           a.i8042.output_port == b.i8042.output_port && a.i8042.pending_command == b.i8042.pending_command &&
           a.i8042.output == b.i8042.output && a.virtio == b.virtio;
}

}  // namespace

TEST_CASE("the configuration section round-trips the machine and drops host-only settings") {
    auto bytes = encode_config(sample_config());
    auto back = decode_config(bytes);
    REQUIRE(back);
    CHECK(back->kernel == "/images/vmlinux");
    CHECK(back->cmdline == "console=ttyS0 sbx.token=abc");
    CHECK(back->cpus == 2);
    CHECK(back->memory_mib == 512);
    REQUIRE(back->disks.size() == 2);
    CHECK(back->disks[1].path == "/disks/data.ext4");
    CHECK(back->disks[1].read_only);
    REQUIRE(back->net);
    CHECK(back->net->mac == "02:00:00:00:00:01");
    REQUIRE(back->vsock);
    CHECK(back->vsock->cid == 3);
    CHECK(back->rng);
    CHECK(back->console.kind == ConsoleConfig::Kind::Stdout);  // the default, not the saved VM's
}

TEST_CASE("a damaged configuration section is refused at every length") {
    auto bytes = encode_config(sample_config());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        auto r = decode_config(std::span(bytes.data(), n));
        REQUIRE_FALSE(r);
        CHECK(r.error().message.starts_with("corrupt:"));
    }
    auto future = bytes;
    future[0] = 9;  // version 9
    auto r = decode_config(future);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("unsupported_version:"));
    auto zero_cpus = sample_config();
    zero_cpus.cpus = 0;
    CHECK_FALSE(decode_config(encode_config(zero_cpus)));  // decoded values are validated
}

TEST_CASE("the machine section round-trips every part of the machine") {
    const auto machine = sample_machine();
    auto bytes = encode_machine(machine);
    auto back = decode_machine(bytes);
    REQUIRE_MESSAGE(back, back.error().to_string());
    CHECK(equal(*back, machine));
    CHECK(encode_machine(*back) == bytes);
}

TEST_CASE("a damaged machine section is refused, not half-decoded") {
    auto bytes = encode_machine(sample_machine());
    REQUIRE(decode_machine(bytes));  // the intact section: what every prefix below falls short of
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        auto r = decode_machine(std::span(bytes.data(), n));
        REQUIRE_FALSE_MESSAGE(r, "a ", n, "-byte prefix of ", bytes.size(), " bytes was accepted");
    }
    auto longer = bytes;
    longer.push_back(0);
    CHECK_FALSE(decode_machine(longer));  // trailing bytes
    // An empty machine (no vCPUs, no chip images) is well framed but holds
    // images of the wrong size: the VM state's decoder refuses it.
    CHECK_FALSE(decode_machine(encode_machine(MachineState{})));
    std::vector<std::uint8_t> huge_count{1, 0, 0xff, 0xff, 0xff, 0xff};  // version 1, 4 billion vCPUs
    auto r = decode_machine(huge_count);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("corrupt:"));
}

// Vm's run, pause, resume, stop and diagnose on a tiny guest through this
// host's /dev/kvm (PVM here will do: the guest is a six-byte ring-0 loop,
// no kernel): one vCPU counting in eax and writing each count to port
// 0x10, where a test device counts the writes. Exits 77 (meson: SKIP) on a
// host without a usable /dev/kvm.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>

#include "vmm/kvm/hw_test_util.hpp"
#include "vmm/kvm/x86_gdt.hpp"
#include "vmm/vm.hpp"

using namespace sbx;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kMemory = 32ULL << 20;
constexpr std::uint64_t kTssAddress = 0xfffbd000;
constexpr std::uint16_t kCounterPort = 0x10;

// Counts the guest's writes to its port; the one that reaches `exit_at`
// asks the VM to power off, as pvpanic would.
struct CounterPort : BusDevice {
    std::atomic<std::uint64_t> writes{0};
    std::uint64_t exit_at = 0;
    ExitLatch* exits = nullptr;
    void read(std::uint64_t, std::span<std::uint8_t> data) override { std::memset(data.data(), 0, data.size()); }
    void write(std::uint64_t, std::span<const std::uint8_t>) override {
        if (++writes == exit_at && exits != nullptr) {
            exits->request({ExitReason::PowerOff, "the counter reached its end"});
        }
    }
};

void put64(std::uint8_t* mem, std::uint64_t at, std::uint64_t v) { std::memcpy(mem + at, &v, sizeof v); }

// At testing::test_entry(): page tables at 0x9000 mapping the first 32 MiB
// with 2 MiB pages, the boot GDT at 0x500, and the loop at the entry:
// inc eax; out 0x10, al; jmp back.
void load_counter_guest(std::uint8_t* mem) {
    const auto entry = kvm::testing::test_entry();
    put64(mem, 0x9000, 0xa000 | 0x3);
    put64(mem, 0xa000, 0xb000 | 0x3);
    for (std::uint64_t i = 0; i < kMemory / (2 << 20); ++i) {
        put64(mem, 0xb000 + 8 * i, (i * (2 << 20)) | 0x83);
    }
    for (std::size_t i = 0; i < x86::kBootGdt.size(); ++i) {
        put64(mem, entry.gdt_base + 8 * i, x86::kBootGdt[i]);
    }
    const std::array<std::uint8_t, 6> code = {0xff, 0xc0, 0xe6, kCounterPort, 0xeb, 0xfa};
    std::memcpy(mem + entry.rip, code.data(), code.size());
}

struct TinyGuest {
    std::shared_ptr<CounterPort> counter = std::make_shared<CounterPort>();
    std::unique_ptr<Vm> vm;

    explicit TinyGuest(std::uint64_t exit_at = 0) {
        auto sys = kvm::System::open();
        if (!sys) {
            std::fprintf(stderr, "SKIP: no usable /dev/kvm: %s\n", sys.error().message.c_str());
            std::exit(77);
        }
        const MemoryRegionSpec ram{GuestAddress{0}, kMemory};
        auto memory = GuestMemory::create(std::span(&ram, 1));
        REQUIRE(memory);
        load_counter_guest(memory->regions()[0].mapping.data());
        auto m = Machine::create(std::move(*sys), std::move(*memory), Console{});
        REQUIRE_MESSAGE(m, m.error().message);
        Machine& machine = **m;
        REQUIRE(machine.kvm_vm.set_tss_address(kTssAddress));
        REQUIRE(machine.kvm_vm.create_irqchip());
        REQUIRE(machine.kvm_vm.create_pit());
        auto serial_irq = machine.add_irq_line(4);
        auto i8042_irq = machine.add_irq_line(1);
        REQUIRE(serial_irq);
        REQUIRE(i8042_irq);
        ConsolePump* console = machine.console.get();
        machine.serial = std::make_shared<Serial>(**serial_irq, [console] { console->output_ready(); });
        machine.i8042 = std::make_shared<I8042>(**i8042_irq, [] {});
        counter->exit_at = exit_at;
        counter->exits = machine.exits.get();
        REQUIRE(machine.pio_bus.insert(counter, kCounterPort, 1));
        REQUIRE(machine.pio_bus.insert(machine.serial, 0x3f8, Serial::kPortCount));
        auto vcpu = machine.kvm_vm.create_vcpu(0, machine.system.vcpu_mmap_size());
        REQUIRE_MESSAGE(vcpu, vcpu.error().message);
        kvm::testing::boot_vcpu(machine.system, *vcpu);
        machine.vcpus.push_back(std::move(*vcpu));
        vm = std::make_unique<Vm>(std::move(*m));
    }

    // Waits (bounded) until the guest has written more than `over` times.
    bool counts_past(std::uint64_t over) const {
        for (int i = 0; i < 3000; ++i) {
            if (counter->writes > over) {
                return true;
            }
            std::this_thread::sleep_for(10ms);
        }
        return false;
    }
};

// run() on its own thread; a failed REQUIRE still stops and joins it.
struct Running {
    explicit Running(Vm& v) : vm(v), exit(std::async(std::launch::async, [&v] { return v.run(); })) {}
    ~Running() {
        vm.request_stop();
        if (exit.valid()) {
            exit.wait();
        }
    }
    VmExit wait(std::chrono::seconds limit) {
        REQUIRE(exit.wait_for(limit) == std::future_status::ready);
        return exit.get();
    }
    Vm& vm;
    std::future<VmExit> exit;
};

}  // namespace

TEST_CASE("a tiny guest runs, pauses (nothing moves), saves its state, resumes and stops") {
    TinyGuest g;
    CHECK(g.vm->pause().error().code == "vm_not_running");  // not running yet
    Running run(*g.vm);
    REQUIRE(g.counts_past(100));

    REQUIRE(g.vm->pause());
    CHECK(g.vm->paused());
    const auto frozen = g.counter->writes.load();
    std::this_thread::sleep_for(100ms);
    CHECK(g.counter->writes == frozen);
    auto state = g.vm->save_state();
    REQUIRE_MESSAGE(state, state.error().message);
    CHECK(state->vcpus.size() == 1);
    CHECK(g.vm->pause());  // pausing a paused VM is a no-op

    REQUIRE(g.vm->resume());
    CHECK_FALSE(g.vm->paused());
    CHECK(g.counts_past(frozen + 100));
    CHECK(g.vm->resume());  // resuming a running VM is a no-op
    auto not_paused = g.vm->save_state();
    REQUIRE_FALSE(not_paused);
    CHECK(not_paused.error().code == "vm_not_paused");

    g.vm->request_stop();
    CHECK(run.wait(30s).reason == ExitReason::Stopped);
    CHECK(g.vm->pause().error().code == "vm_not_running");
}

TEST_CASE("a stop while paused ends run() without resuming the guest") {
    TinyGuest g;
    Running run(*g.vm);
    REQUIRE(g.counts_past(10));
    REQUIRE(g.vm->pause());
    const auto frozen = g.counter->writes.load();
    g.vm->request_stop();
    CHECK(run.wait(30s).reason == ExitReason::Stopped);
    CHECK(g.counter->writes == frozen);
}

TEST_CASE("an exit a device requests ends run() with that reason; the first request wins") {
    TinyGuest g(500);
    Running run(*g.vm);
    auto exit = run.wait(60s);
    CHECK(exit.reason == ExitReason::PowerOff);
    CHECK(exit.message == "the counter reached its end");
    g.vm->request_stop();  // too late: the first request stays
    CHECK(g.counter->writes >= 500);
}

TEST_CASE("diagnose finds the running guest in its loop and leaves it running") {
    TinyGuest g;
    Running run(*g.vm);
    REQUIRE(g.counts_past(10));
    auto d = g.vm->diagnose();
    REQUIRE_MESSAGE(d, d.error().message);
    CHECK_FALSE(d->was_paused);
    REQUIRE(d->vcpus.size() == 1);
    const auto entry = kvm::testing::test_entry().rip;
    CHECK(d->vcpus[0].rip >= entry);
    CHECK(d->vcpus[0].rip < entry + 6);
    CHECK_FALSE(g.vm->paused());
    const auto after = g.counter->writes.load();
    CHECK(g.counts_past(after + 10));
    g.vm->request_stop();
    run.wait(30s);
}

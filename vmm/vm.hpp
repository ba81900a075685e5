// A running microVM: the assembled Machine (vmm/machine.hpp), one thread
// per vCPU (their run states in vmm/vcpu_run_states.hpp), the device
// thread, and the calling thread's loop for exit requests and the console
// (vmm/console_pump.hpp). run() blocks until the guest resets, powers off
// or fails, or an exit is requested.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/result.hpp"
#include "vmm/kvm/diagnosis.hpp"
#include "vmm/machine.hpp"
#include "vmm/memory/page_walk.hpp"
#include "base/thread_class.hpp"
#include "vmm/vcpu_run_states.hpp"
#include "vmm/vm_exit.hpp"

namespace sbx {

// Everything a VM is apart from guest memory and host backends: what a
// snapshot stores besides memory, and what VmBuilder::restore puts back.
struct MachineState {
    std::vector<kvm::VcpuState> vcpus;
    kvm::VmState vm;  // PIC, IOAPIC, PIT, kvmclock
    Serial::State serial;
    I8042::State i8042;
    std::vector<std::vector<std::uint8_t>> virtio;  // one MmioTransport state per slot
};

// Where a guest is, for a supervisor or a test that finds it stuck
// (docs/vmm-control.md, "diagnose").
struct VmDiagnosis {
    using Counters = kvm::KvmStats::Counters;
    bool was_paused = false;
    // Why the vCPUs' registers are missing: they did not stop (a vCPU stuck
    // in KVM_RUN); the counters and the chips are there all the same.
    std::string vcpus_unavailable;
    std::vector<kvm::VcpuDiagnosis> vcpus;
    // Each vCPU's rip through its page tables in guest memory (long mode
    // only; an error when a table lies outside memory): a CPU that keeps
    // faulting on a rip its memory maps was given a stale translation.
    std::vector<std::optional<Result<PageWalk>>> rip_walks;
    kvm::ChipDiagnosis chips;
    Serial::State serial;
    std::vector<Counters> vcpu_stats;  // KVM's counters per vCPU, read before the pause
    Counters vm_stats;
};

class Vm {
public:
    using Clock = std::chrono::steady_clock;

    // `start` is when the VMM began (logged with the set-up time). The
    // machine needs its serial, i8042 and vCPUs.
    explicit Vm(std::unique_ptr<Machine> machine, Clock::time_point start = Clock::now());
    Vm(const Vm&) = delete;
    Vm& operator=(const Vm&) = delete;
    ~Vm();

    // Called on each thread the VM starts (vCPUs, the device loop) before it
    // does any work, and on the calling thread of run() once those are
    // started (base/thread_class.hpp). Only before run().
    void set_thread_start_hook(ThreadStartHook hook) { thread_hook_ = std::move(hook); }

    VmExit run();
    // Thread-safe: makes run() return with `exit` (the first request wins).
    void request_exit(VmExit exit);
    void request_stop() { request_exit({ExitReason::Stopped, "stopped by request"}); }

    // Parks every vCPU (each completes its pending I/O exit first, api.rst
    // 5 "kvm_run"), tells the guest through kvmclock, stops the device
    // thread and quiesces the devices (in-flight I/O completes). Any thread;
    // only while run() is running.
    [[nodiscard]] Result<void> pause();
    [[nodiscard]] Result<void> resume();
    [[nodiscard]] bool paused() const;
    // The machine state of a paused VM.
    [[nodiscard]] Result<MachineState> save_state() const;
    // Puts back a saved machine state; only before run() (VmBuilder::restore).
    [[nodiscard]] Result<void> restore_state(const MachineState& state);
    // Reads KVM's counters, then pauses a running VM for as long as reading
    // its vCPUs and chips takes and resumes it. Not while another thread
    // pauses or resumes (the control server serves one request at a time).
    [[nodiscard]] Result<VmDiagnosis> diagnose();

    // The guest's working set, as the pages it writes between the two calls
    // (KVM dirty logging on every memory slot); stopping returns them as
    // ranges of guest addresses and turns logging off.
    [[nodiscard]] Result<void> start_dirty_tracking();
    [[nodiscard]] Result<std::vector<MemoryRegionSpec>> stop_dirty_tracking();

    [[nodiscard]] std::optional<std::chrono::microseconds> boot_time() const {
        return m_->boot_timer ? m_->boot_timer->boot_time() : std::nullopt;
    }
    [[nodiscard]] const GuestMemory& memory() const { return m_->memory; }
    [[nodiscard]] unsigned vcpu_count() const { return static_cast<unsigned>(m_->vcpus.size()); }

private:
    // KVM's counters for diagnose(), opened before any vCPU runs
    // (kvm::KvmStats); a kernel without them leaves the counters empty.
    void open_stats();
    void vcpu_loop(kvm::Vcpu& vcpu, std::size_t index);
    [[nodiscard]] bool handle_exit(const kvm::Vcpu& vcpu, const kvm::VcpuExit& exit);
    // The calling thread's loop: until an exit is requested.
    void run_loop();
    // Sets immediate_exit on every vCPU and signals its thread out of KVM_RUN.
    void kick_vcpus();
    void stop_vcpus();
    void start_device_thread();
    void stop_device_thread();

    std::unique_ptr<Machine> m_;
    Clock::time_point start_;
    VcpuRunStates run_states_;
    std::vector<std::optional<kvm::KvmStats>> vcpu_stats_;  // one per vCPU
    std::optional<kvm::KvmStats> vm_stats_;
    // One pause or resume at a time; guards paused_ and running_ (run()
    // flips running_ around its loop, so a pause never sees threads_ change).
    mutable std::mutex control_mutex_;
    bool paused_ = false;
    bool running_ = false;
    std::vector<std::thread> threads_;
    std::thread device_thread_;
    ThreadStartHook thread_hook_;
};

}  // namespace sbx

// A running microVM: guest memory, KVM VM and vCPUs, the buses and legacy
// devices, and one thread per vCPU plus the calling thread's event loop.
// Built by VmBuilder; run() blocks until the guest resets, powers off or fails.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/event_fd.hpp"
#include "base/event_loop.hpp"
#include "base/result.hpp"
#include "base/unique_fd.hpp"
#include "devices/bus.hpp"
#include "devices/interrupt.hpp"
#include "devices/legacy/boot_timer.hpp"
#include "devices/legacy/i8042.hpp"
#include "devices/legacy/serial.hpp"
#include "devices/pci/pci_host.hpp"
#include "devices/pci/pvpanic.hpp"
#include "devices/virtio/mmio/mmio_transport.hpp"
#include "vmm/config.hpp"
#include "vmm/console.hpp"
#include "vmm/kvm/diagnosis.hpp"
#include "vmm/kvm/kvm.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx {

enum class ExitReason {
    Reboot,       // guest reboot (i8042 reset line): a clean exit
    PowerOff,     // guest poweroff (pvpanic SHUTDOWN, or a KVM system event)
    Panic,        // guest kernel panic (pvpanic PANICKED)
    TripleFault,  // KVM_EXIT_SHUTDOWN
    KvmError,     // internal error, failed entry, unhandled exit
    VmmError,     // the VMM itself failed (an ioctl, a thread)
    Stopped,      // stopped by the embedder through request_stop()
};

struct VmExit {
    ExitReason reason;
    std::string message;
};

// The sbx-vmm process exit status for a reason: 0 for a clean guest exit.
[[nodiscard]] int exit_code(ExitReason reason);
[[nodiscard]] const char* to_string(ExitReason reason);

// An interrupt line backed by an eventfd registered with KVM_IRQFD.
class IrqFdLine final : public InterruptLine {
public:
    explicit IrqFdLine(EventFd fd) : fd_(std::move(fd)) {}
    void trigger() override { [[maybe_unused]] auto r = fd_.signal(); }
    [[nodiscard]] int fd() const { return fd_.fd(); }

private:
    EventFd fd_;
};

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
    kvm::ChipDiagnosis chips;
    Serial::State serial;
    std::vector<Counters> vcpu_stats;  // KVM's counters per vCPU, read before the pause
    Counters vm_stats;
};

class Vm {
public:
    using Clock = std::chrono::steady_clock;

    Vm(const Vm&) = delete;
    Vm& operator=(const Vm&) = delete;
    ~Vm();

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
    // Reads KVM's counters, then pauses a running VM for as long as reading
    // its vCPUs and chips takes and resumes it. Not while another thread
    // pauses or resumes (the control server serves one request at a time).
    [[nodiscard]] Result<VmDiagnosis> diagnose();

    // The guest's working set, as the pages it writes between the two calls
    // (KVM dirty logging on every memory slot); stopping returns them as
    // ranges of guest addresses and turns logging off.
    [[nodiscard]] Result<void> start_dirty_tracking();
    [[nodiscard]] Result<std::vector<MemoryRegionSpec>> stop_dirty_tracking();

    [[nodiscard]] std::optional<std::chrono::microseconds> boot_time() const { return boot_timer_->boot_time(); }
    [[nodiscard]] const GuestMemory& memory() const { return memory_; }
    [[nodiscard]] unsigned vcpu_count() const { return static_cast<unsigned>(vcpus_.size()); }

private:
    friend class VmBuilder;
    Vm(kvm::System system, kvm::Vm vm, GuestMemory memory, EventFd exit_event, EventFd console_ready);

    // Puts back a saved machine state into a VM that has not run yet (VmBuilder::restore).
    [[nodiscard]] Result<void> restore_state(const MachineState& state);
    // KVM's counters for diagnose(), opened before any vCPU runs
    // (kvm::KvmStats); a kernel without them leaves the counters empty.
    void open_stats();
    void vcpu_loop(kvm::Vcpu& vcpu);
    void park_vcpu();
    [[nodiscard]] bool handle_exit(const kvm::Vcpu& vcpu, const kvm::VcpuExit& exit);
    void event_loop();
    // Sets immediate_exit on every vCPU and signals its thread out of KVM_RUN.
    void kick_vcpus();
    void stop_vcpus();
    void start_device_thread();
    void stop_device_thread();
    // Moves console output from the UART to the console without blocking;
    // returns true when bytes are still waiting for the reader.
    bool pump_console_output();
    void drain_console_at_exit();

    // Declared in dependency order: members below refer to members above,
    // and are destroyed first.
    kvm::System system_;
    kvm::Vm kvm_vm_;
    GuestMemory memory_;
    EventFd exit_event_;
    EventFd console_ready_;  // the UART has output for the console
    Console console_;
    // Runs the virtio devices' queue notifications and backend fds.
    std::unique_ptr<EventLoop> device_loop_;
    std::vector<std::unique_ptr<IrqFdLine>> irq_lines_;
    std::shared_ptr<Serial> serial_;
    std::shared_ptr<I8042> i8042_;
    std::shared_ptr<PciHost> pci_host_;
    std::shared_ptr<PvPanic> pvpanic_;
    std::shared_ptr<BootTimer> boot_timer_;
    std::vector<std::shared_ptr<virtio::MmioTransport>> virtio_devices_;
    std::vector<EventFd> queue_notifiers_;  // ioeventfds on QueueNotify, one per queue
    Bus pio_bus_{"pio"};
    Bus mmio_bus_{"mmio"};
    std::vector<kvm::Vcpu> vcpus_;
    std::vector<std::optional<kvm::KvmStats>> vcpu_stats_;  // one per vCPU
    std::optional<kvm::KvmStats> vm_stats_;
    std::string console_pending_;  // taken from the UART, not yet written
    Clock::time_point start_;       // when the VMM started (the boot timer's zero)

    std::atomic<bool> stopping_{false};
    // Pause: the requester sets pause_requested_ and kicks; each vCPU thread
    // parks after its next KVM_RUN returns EINTR.
    mutable std::mutex run_state_mutex_;
    std::condition_variable run_state_changed_;
    std::atomic<bool> pause_requested_{false};
    unsigned parked_ = 0;
    bool paused_ = false;
    bool running_ = false;
    std::mutex exit_mutex_;
    std::optional<VmExit> exit_;
    std::vector<std::thread> threads_;
    std::thread device_thread_;
};

}  // namespace sbx

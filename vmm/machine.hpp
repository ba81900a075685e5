// The assembled machine: every part VmBuilder puts together (or a test,
// around a tiny guest) and Vm runs. Parts refer to parts declared above
// them (a virtio transport to the guest memory and the device loop, the
// UART to its interrupt line and the console pump), so the members are
// destroyed in reverse order, and a Machine lives behind a unique_ptr: it
// is never moved once parts hold references into it.
#pragma once

#include <memory>
#include <vector>

#include "base/event_fd.hpp"
#include "base/event_loop.hpp"
#include "devices/bus.hpp"
#include "devices/interrupt.hpp"
#include "devices/legacy/boot_timer.hpp"
#include "devices/legacy/i8042.hpp"
#include "devices/legacy/serial.hpp"
#include "devices/virtio/mmio/mmio_transport.hpp"
#include "vmm/console_pump.hpp"
#include "vmm/kvm/kvm.hpp"
#include "vmm/memory/guest_memory.hpp"
#include "vmm/vm_exit.hpp"

namespace sbx {

// An interrupt line backed by an eventfd registered with KVM_IRQFD.
class IrqFdLine final : public InterruptLine {
public:
    explicit IrqFdLine(EventFd fd) : fd_(std::move(fd)) {}
    void trigger() override { [[maybe_unused]] auto r = fd_.signal(); }
    [[nodiscard]] int fd() const { return fd_.fd(); }

private:
    EventFd fd_;
};

struct Machine {
    // A KVM VM with `memory` registered slot by slot, an exit latch, both
    // event loops and the console pump; no chips, devices or vCPUs yet.
    static Result<std::unique_ptr<Machine>> create(kvm::System system, GuestMemory memory, Console console);

    Machine(const Machine&) = delete;
    Machine& operator=(const Machine&) = delete;

    // A new interrupt line to `gsi`: an eventfd registered with KVM_IRQFD,
    // owned by irq_lines.
    [[nodiscard]] Result<InterruptLine*> add_irq_line(std::uint32_t gsi);

    kvm::System system;
    kvm::Vm kvm_vm;
    GuestMemory memory;
    std::unique_ptr<ExitLatch> exits;
    // The thread in Vm::run(): exit requests and the console.
    std::unique_ptr<EventLoop> run_loop;
    // The device thread: virtio queue notifications and backend fds.
    std::unique_ptr<EventLoop> device_loop;
    std::unique_ptr<ConsolePump> console;
    std::vector<std::unique_ptr<IrqFdLine>> irq_lines;
    std::shared_ptr<Serial> serial;           // required
    std::shared_ptr<I8042> i8042;             // required
    std::shared_ptr<BootTimer> boot_timer;    // optional
    std::vector<std::shared_ptr<virtio::MmioTransport>> virtio_devices;
    std::vector<EventFd> queue_notifiers;     // ioeventfds on QueueNotify, one per queue
    Bus pio_bus{"pio"};
    Bus mmio_bus{"mmio"};
    std::vector<kvm::Vcpu> vcpus;

private:
    Machine(kvm::System s, kvm::Vm v, GuestMemory m)
        : system(std::move(s)), kvm_vm(std::move(v)), memory(std::move(m)) {}
};

}  // namespace sbx

#include "vmm/machine.hpp"

namespace sbx {

Result<std::unique_ptr<Machine>> Machine::create(kvm::System system, GuestMemory memory, Console console) {
    auto kvm_vm = system.create_vm();
    if (!kvm_vm) {
        return kvm_vm.error();
    }
    std::unique_ptr<Machine> m(new Machine(std::move(system), std::move(*kvm_vm), std::move(memory)));
    std::uint32_t slot = 0;
    for (const auto& region : m->memory.regions()) {
        auto r = m->kvm_vm.set_user_memory_region(slot++, region.start.value, region.size(), region.mapping.data());
        if (!r) {
            return r.error();
        }
    }
    auto exits = ExitLatch::create();
    if (!exits) {
        return exits.error();
    }
    m->exits = std::move(*exits);
    for (auto* loop : {&m->run_loop, &m->device_loop}) {
        auto created = EventLoop::create();
        if (!created) {
            return created.error();
        }
        *loop = std::move(*created);
    }
    auto pump = ConsolePump::create(std::move(console));
    if (!pump) {
        return pump.error();
    }
    m->console = std::move(*pump);
    return m;
}

Result<InterruptLine*> Machine::add_irq_line(std::uint32_t gsi) {
    auto fd = EventFd::create();
    if (!fd) {
        return fd.error();
    }
    if (auto r = kvm_vm.register_irqfd(fd->fd(), gsi); !r) {
        return r.error();
    }
    irq_lines.push_back(std::make_unique<IrqFdLine>(std::move(*fd)));
    return static_cast<InterruptLine*>(irq_lines.back().get());
}

}  // namespace sbx

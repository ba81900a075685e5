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

}  // namespace sbx

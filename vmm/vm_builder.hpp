// Assembles a Vm from a VmConfig in explicit, ordered steps: every failure
// is reported with the step it happened in, before any vCPU runs.
#pragma once

#include <memory>

#include "vmm/vm.hpp"

namespace sbx {

class VmBuilder {
public:
    // `start` is when the VMM began (the boot timer measures from it).
    explicit VmBuilder(VmConfig config, Vm::Clock::time_point start = Vm::Clock::now())
        : config_(std::move(config)), start_(start) {}

    [[nodiscard]] Result<std::unique_ptr<Vm>> build();

private:
    Result<void> create_memory(Vm& vm);
    Result<void> create_irqchip(Vm& vm);
    Result<void> add_legacy_devices(Vm& vm);
    Result<void> open_console(Vm& vm);
    Result<void> add_virtio_devices(Vm& vm);
    Result<void> create_vcpus(Vm& vm);
    Result<InterruptLine*> add_irq_line(Vm& vm, std::uint32_t gsi);

    VmConfig config_;
    Vm::Clock::time_point start_;
    kvm::LongModeEntry entry_{};
    std::vector<std::unique_ptr<virtio::VirtioDevice>> virtio_devices_;  // opened, not yet attached
};

}  // namespace sbx

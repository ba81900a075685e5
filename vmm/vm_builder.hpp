// Assembles a Vm from a VmConfig in explicit, ordered steps: every failure
// is reported with the step it happened in, before any vCPU runs.
#pragma once

#include <functional>
#include <memory>

#include "vmm/config.hpp"
#include "vmm/vm.hpp"

namespace sbx {

class VmBuilder {
public:
    // `start` is when the VMM began (the boot timer measures from it).
    explicit VmBuilder(VmConfig config, Vm::Clock::time_point start = Vm::Clock::now())
        : config_(std::move(config)), start_(start) {}

    [[nodiscard]] Result<std::unique_ptr<Vm>> build();

    // Guest memory of a restored VM: each region's mapping (anonymous, or a
    // snapshot file copy-on-write), then its contents.
    struct RestoredMemory {
        GuestMemory::MapRegion map_region;
        std::function<Result<void>(const GuestMemory&)> load;  // may be empty
    };
    // The VM a snapshot was taken of, from that VM's config (the saved
    // machine on the caller's host side, snapshot/restore_config.hpp): no kernel is loaded; memory comes
    // from `memory` and every vCPU, chip and device from `state`. Refuses
    // a CPU this host cannot provide (cpu_mismatch) before touching memory.
    [[nodiscard]] Result<std::unique_ptr<Vm>> restore(const MachineState& state, const RestoredMemory& memory);

private:
    // The machine without vCPUs: console, KVM VM and memory, chips, devices.
    Result<std::unique_ptr<Machine>> assemble(kvm::System system, GuestMemory memory);
    Result<void> restore_vcpus(Machine& m);
    Result<void> create_irqchip(Machine& m);
    Result<void> add_legacy_devices(Machine& m);
    Result<void> add_pci_devices(Machine& m);
    Result<void> add_virtio_devices(Machine& m);
    Result<void> create_vcpus(Machine& m);

    VmConfig config_;
    Vm::Clock::time_point start_;
    kvm::LongModeEntry entry_{};
    std::vector<std::unique_ptr<virtio::VirtioDevice>> virtio_devices_;  // opened, not yet attached
};

}  // namespace sbx

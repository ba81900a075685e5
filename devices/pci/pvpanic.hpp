// pvpanic, the paravirtual "guest is going down" register of QEMU
// (docs/specs/pvpanic.rst), reached here the way QEMU's pvpanic-pci device
// is: PCI function 1b36:0011, its register in BAR 0 (Linux 6.12
// drivers/misc/pvpanic/pvpanic-pci.c). Reading the register returns the
// events the device supports; writing it reports events:
//   bit 0 PANICKED: the kernel's panic notifier (before any panic= reboot),
//   bit 1 CRASH_LOADED: a panic with a crash kernel loaded (not offered, so
//         the guest goes on into kdump without telling us),
//   bit 2 SHUTDOWN: the guest is powering off; Linux registers its power-off
//         handler when the device offers this bit, so `poweroff` reaches
//         the VMM instead of halting the vCPUs.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/result.hpp"
#include "devices/bus.hpp"
#include "devices/pci/pci_function.hpp"

namespace sbx {

class PvPanic final : public BusDevice {
public:
    static constexpr std::uint8_t kPanicked = 1U << 0;
    static constexpr std::uint8_t kCrashLoaded = 1U << 1;
    static constexpr std::uint8_t kShutdown = 1U << 2;
    static constexpr std::uint8_t kSupported = kPanicked | kShutdown;
    // The I/O BAR's size (the register is its first byte).
    static constexpr std::uint16_t kPortCount = 16;

    enum class Event { Panicked, Shutdown };

    // `on_event` runs on the vCPU thread that wrote the register; a write
    // reporting both events reports Panicked.
    explicit PvPanic(std::function<void(Event)> on_event) : on_event_(std::move(on_event)) {}

    // Its PCI function, BAR 0 decoding kPortCount ports at `port`.
    [[nodiscard]] static Result<PciFunction> pci_function(std::uint16_t port);

    void read(std::uint64_t offset, std::span<std::uint8_t> data) override;
    void write(std::uint64_t offset, std::span<const std::uint8_t> data) override;

private:
    std::function<void(Event)> on_event_;  // no state: nothing to save
};

}  // namespace sbx

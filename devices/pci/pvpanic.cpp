#include "devices/pci/pvpanic.hpp"

#include <algorithm>

namespace sbx {

Result<PciFunction> PvPanic::pci_function(std::uint16_t port) {
    // QEMU hw/misc/pvpanic-pci.c: Red Hat vendor 0x1b36, device 0x0011,
    // revision 1, class 0x0880 (system peripheral, other).
    return PciFunction::create(
        PciIdentity{.vendor_id = 0x1b36, .device_id = 0x0011, .class_code = 0x088000, .revision = 1},
        PciIoBar{port, kPortCount});
}

void PvPanic::read(std::uint64_t offset, std::span<std::uint8_t> data) {
    std::fill(data.begin(), data.end(), std::uint8_t{0});
    if (offset == 0 && !data.empty()) {
        data[0] = kSupported;
    }
}

void PvPanic::write(std::uint64_t offset, std::span<const std::uint8_t> data) {
    if (offset != 0 || data.empty()) {
        return;
    }
    const std::uint8_t events = data[0] & kSupported;
    if ((events & kPanicked) != 0) {
        on_event_(Event::Panicked);
    } else if ((events & kShutdown) != 0) {
        on_event_(Event::Shutdown);
    }
}

}  // namespace sbx

// The virtio devices a VmConfig asks for, opened before the VM exists so a
// missing disk image or tap is reported before /dev/kvm is touched, and
// the kernel command-line entries that announce them (virtio-mmio
// "virtio_mmio.device=<size>@<base>:<irq>", Documentation/admin-guide/
// kernel-parameters.txt).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "devices/virtio/virtio_device.hpp"
#include "vmm/config.hpp"

namespace sbx {

// In slot order: disks (vda, vdb, ...), then net, vsock, rng.
[[nodiscard]] Result<std::vector<std::unique_ptr<virtio::VirtioDevice>>> open_virtio_devices(const VmConfig& config);

// " virtio_mmio.device=4K@0xd0001000:5 ..." for slots 0..count-1.
[[nodiscard]] std::string virtio_mmio_cmdline(std::size_t count);

}  // namespace sbx

#include "vmm/virtio_devices.hpp"

#include "devices/virtio/blk/blk.hpp"
#include "devices/virtio/net/net.hpp"
#include "devices/virtio/rng/rng.hpp"
#include "devices/virtio/vsock/vsock.hpp"
#include "vmm/boot/layout.hpp"

namespace sbx {

Result<std::vector<std::unique_ptr<virtio::VirtioDevice>>> open_virtio_devices(const VmConfig& config) {
    std::vector<std::unique_ptr<virtio::VirtioDevice>> devices;
    for (std::size_t i = 0; i < config.disks.size(); ++i) {
        const DiskConfig& disk = config.disks[i];
        // Linux names virtio disks vda, vdb, ... in probe order, which is
        // command-line order for virtio-mmio.
        std::string name = "vd" + std::string(1, static_cast<char>('a' + i));
        auto blk = virtio::Block::open(
            virtio::BlockConfig{.path = disk.path, .read_only = disk.read_only, .allow_backing = disk.allow_backing},
            name);
        if (!blk) {
            return blk.error().context(fmt::format("disk {}", i + 1));
        }
        devices.push_back(std::move(*blk));
    }
    if (config.net) {
        virtio::NetConfig net{config.net->tap, std::nullopt};
        if (!config.net->mac.empty()) {
            auto mac = parse_mac(config.net->mac);
            if (!mac) {
                return mac.error().context("net");
            }
            net.mac = *mac;
        }
        auto dev = virtio::Net::open(net);
        if (!dev) {
            return dev.error().context("net");
        }
        devices.push_back(std::move(*dev));
    }
    if (config.vsock) {
        auto dev = virtio::Vsock::open(virtio::VsockConfig{config.vsock->cid, config.vsock->uds});
        if (!dev) {
            return dev.error().context("vsock");
        }
        devices.push_back(std::move(*dev));
    }
    if (config.rng) {
        devices.push_back(virtio::Rng::create());
    }
    return devices;
}

std::string virtio_mmio_cmdline(std::size_t count) {
    std::string out;
    for (std::size_t i = 0; i < count; ++i) {
        auto slot = static_cast<std::uint32_t>(i);
        out += fmt::format(" virtio_mmio.device={}K@{:#x}:{}", boot::kVirtioMmioStride / 1024,
                           boot::virtio_mmio_addr(slot).value, boot::virtio_mmio_irq(slot));
    }
    return out;
}

}  // namespace sbx

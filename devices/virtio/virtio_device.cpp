#include "devices/virtio/virtio_device.hpp"

#include <algorithm>
#include <cstring>

namespace sbx::virtio {

void read_config_bytes(std::span<const std::uint8_t> config, std::uint64_t offset, std::span<std::uint8_t> out) {
    std::fill(out.begin(), out.end(), 0);
    if (offset >= config.size()) {
        return;
    }
    std::size_t n = std::min<std::uint64_t>(out.size(), config.size() - offset);
    std::memcpy(out.data(), config.data() + offset, n);
}

}  // namespace sbx::virtio

#include "devices/bus.hpp"

#include <algorithm>

namespace sbx {

Result<void> Bus::insert(std::shared_ptr<BusDevice> device, std::uint64_t base, std::uint64_t length) {
    if (frozen_) {
        return make_error("{} bus: cannot add a device after the VM started", name_);
    }
    if (length == 0 || base > UINT64_MAX - (length - 1)) {
        return make_error("{} bus: invalid range {:#x}+{:#x}", name_, base, length);
    }
    std::uint64_t last = base + (length - 1);
    // The first range at or after base must start past our end; the one
    // before base must end before base.
    auto next = ranges_.lower_bound(base);
    if (next != ranges_.end() && next->first <= last) {
        return make_error("{} bus: range {:#x}+{:#x} overlaps the device at {:#x}", name_, base,
                          length, next->first);
    }
    if (next != ranges_.begin()) {
        auto prev = std::prev(next);
        if (prev->first + (prev->second.length - 1) >= base) {
            return make_error("{} bus: range {:#x}+{:#x} overlaps the device at {:#x}", name_, base,
                              length, prev->first);
        }
    }
    ranges_.emplace(base, Range{length, std::move(device)});
    return ok();
}

const std::pair<const std::uint64_t, Bus::Range>* Bus::find(std::uint64_t address, std::size_t size) const {
    auto it = ranges_.upper_bound(address);
    if (it == ranges_.begin()) {
        return nullptr;
    }
    --it;
    std::uint64_t offset = address - it->first;
    if (offset >= it->second.length || size > it->second.length - offset) {
        return nullptr;
    }
    return &*it;
}

bool Bus::read(std::uint64_t address, std::span<std::uint8_t> data) const {
    const auto* entry = find(address, data.size());
    if (entry == nullptr) {
        std::fill(data.begin(), data.end(), 0xff);
        return false;
    }
    entry->second.device->read(address - entry->first, data);
    return true;
}

bool Bus::write(std::uint64_t address, std::span<const std::uint8_t> data) const {
    const auto* entry = find(address, data.size());
    if (entry == nullptr) {
        return false;
    }
    entry->second.device->write(address - entry->first, data);
    return true;
}

}  // namespace sbx

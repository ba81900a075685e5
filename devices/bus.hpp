// One bus type for port I/O and MMIO: address ranges in an ordered map,
// overlaps rejected at insert, devices addressed by offset within their
// range. After freeze() the map is never modified, so vCPU threads look
// devices up without taking a lock; each device serializes itself.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "base/result.hpp"

namespace sbx {

class BusDevice {
public:
    virtual ~BusDevice() = default;
    // data.size() is the access width (1, 2, 4 or 8); reads fill data.
    virtual void read(std::uint64_t offset, std::span<std::uint8_t> data) = 0;
    virtual void write(std::uint64_t offset, std::span<const std::uint8_t> data) = 0;
};

class Bus {
public:
    explicit Bus(std::string name) : name_(std::move(name)) {}

    [[nodiscard]] Result<void> insert(std::shared_ptr<BusDevice> device, std::uint64_t base,
                                      std::uint64_t length);
    void freeze() { frozen_ = true; }

    // Dispatch an access; false when no device claims the address (reads then
    // see all ones, as on a real bus with nothing driving it).
    bool read(std::uint64_t address, std::span<std::uint8_t> data) const;
    bool write(std::uint64_t address, std::span<const std::uint8_t> data) const;

private:
    struct Range {
        std::uint64_t length;
        std::shared_ptr<BusDevice> device;
    };
    // The device covering [address, address + size), if one covers all of it.
    [[nodiscard]] const std::pair<const std::uint64_t, Range>* find(std::uint64_t address,
                                                                    std::size_t size) const;

    std::string name_;
    std::map<std::uint64_t, Range> ranges_;  // keyed by base address
    bool frozen_ = false;
};

}  // namespace sbx

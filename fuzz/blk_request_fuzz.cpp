// libFuzzer target: a guest that controls every field of a virtio-blk
// request (§5.2.6) and a disk of any size, writability and features.
// blk::decide must never hand the device a range outside the disk, a
// partial sector, a change to a read-only disk, or a get-id longer than
// the id; anything else it refuses with a status.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "devices/virtio/blk/blk_request.hpp"

namespace {

using namespace sbx::virtio::blk;

template <typename T>
T take(const std::uint8_t*& data, std::size_t& size) {
    T value{};
    const std::size_t n = size < sizeof value ? size : sizeof value;
    std::memcpy(&value, data, n);
    data += n;
    size -= n;
    return value;
}

void require(bool holds) {
    if (!holds) {
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    RequestShape r;
    r.type = take<std::uint32_t>(data, size);
    r.sector = take<std::uint64_t>(data, size);
    r.in_bytes = take<std::uint64_t>(data, size);
    r.out_bytes = take<std::uint64_t>(data, size);
    const auto flags = take<std::uint8_t>(data, size);
    if ((flags & 1) != 0) {
        r.range = take<DiscardWriteZeroes>(data, size);
    }
    DiskShape disk;
    disk.capacity_sectors = take<std::uint64_t>(data, size);
    disk.read_only = (flags & 2) != 0;
    disk.features = take<std::uint64_t>(data, size);

    const Decision d = decide(r, disk);
    switch (d.op) {
        case Operation::Answer:
            require(d.status == kStatusOk || d.status == kStatusIoErr || d.status == kStatusUnsupp);
            break;
        case Operation::GetId:
            require(d.length <= kIdBytes && d.length <= r.in_bytes);
            break;
        case Operation::Flush:
            require(!disk.read_only);
            break;
        case Operation::Read:
        case Operation::Write:
        case Operation::Discard:
        case Operation::WriteZeroes: {
            const bool changes = d.op != Operation::Read;
            require(!(changes && disk.read_only));
            require(d.length > 0 && d.length % kSectorSize == 0 && d.offset % kSectorSize == 0);
            const std::uint64_t end_sector = d.offset / kSectorSize + d.length / kSectorSize;
            require(d.offset / kSectorSize <= disk.capacity_sectors && end_sector <= disk.capacity_sectors);
            if (d.op == Operation::Read) {
                require(d.length == r.in_bytes && r.out_bytes == 0);
            } else if (d.op == Operation::Write) {
                require(d.length == r.out_bytes && r.in_bytes == 0);
            } else {
                require(r.range.has_value() && r.out_bytes == sizeof(DiscardWriteZeroes));
                require(d.length <= std::uint64_t{kMaxRangeSectors} * kSectorSize);
                require(d.op == Operation::WriteZeroes || !d.unmap);
            }
            break;
        }
    }
    return 0;
}

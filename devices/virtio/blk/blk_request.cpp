#include "devices/virtio/blk/blk_request.hpp"

#include <algorithm>

namespace sbx::virtio::blk {

namespace {

Decision answer(std::uint8_t status) {
    return Decision{Operation::Answer, status};
}

// A whole number of sectors from `sector` on, all inside the disk.
bool in_disk(const DiskShape& disk, std::uint64_t sector, std::uint64_t len) {
    return len % kSectorSize == 0 && sector <= disk.capacity_sectors &&
           len / kSectorSize <= disk.capacity_sectors - sector;
}

Decision transfer(const RequestShape& r, const DiskShape& disk, bool is_read) {
    // Data of a read is device-writable, of a write device-readable.
    const std::uint64_t len = is_read ? r.in_bytes : r.out_bytes;
    const std::uint64_t wrong_way = is_read ? r.out_bytes : r.in_bytes;
    if (wrong_way != 0 || !in_disk(disk, r.sector, len)) {
        return answer(kStatusIoErr);
    }
    if (len == 0) {
        return answer(kStatusOk);
    }
    return Decision{is_read ? Operation::Read : Operation::Write, kStatusOk, r.sector * kSectorSize, len};
}

Decision zeroing(const RequestShape& r, const DiskShape& disk, bool discard) {
    if ((disk.features & (discard ? kFeatureDiscard : kFeatureWriteZeroes)) == 0) {
        return answer(kStatusUnsupp);
    }
    if (r.in_bytes != 0 || r.out_bytes == 0 || r.out_bytes % sizeof(DiscardWriteZeroes) != 0) {
        return answer(kStatusIoErr);
    }
    if (r.out_bytes > sizeof(DiscardWriteZeroes) || !r.range) {
        return answer(kStatusUnsupp);  // max_discard_seg and max_write_zeroes_seg are 1
    }
    const DiscardWriteZeroes& range = *r.range;
    const bool unmap = (range.flags & kFlagUnmap) != 0;
    // §5.2.6.2: unknown flags, and unmap on a discard, are unsupported.
    if ((range.flags & ~kFlagUnmap) != 0 || (discard && unmap)) {
        return answer(kStatusUnsupp);
    }
    const std::uint64_t len = std::uint64_t{range.num_sectors} * kSectorSize;
    if (range.num_sectors > kMaxRangeSectors || !in_disk(disk, range.sector, len)) {
        return answer(kStatusIoErr);
    }
    if (len == 0) {
        return answer(kStatusOk);
    }
    return Decision{discard ? Operation::Discard : Operation::WriteZeroes, kStatusOk, range.sector * kSectorSize,
                    len, unmap};
}

}  // namespace

Decision decide(const RequestShape& request, const DiskShape& disk) {
    const std::uint32_t type = request.type;
    const bool modifies = type == kTypeOut || type == kTypeDiscard || type == kTypeWriteZeroes;
    if (modifies && disk.read_only) {
        return answer(kStatusIoErr);  // §5.2.6.2: nothing is written
    }
    switch (type) {
        case kTypeIn:
            return transfer(request, disk, /*is_read=*/true);
        case kTypeOut:
            return transfer(request, disk, /*is_read=*/false);
        case kTypeFlush:
            // A read-only disk has nothing written to write back.
            return disk.read_only ? answer(kStatusOk) : Decision{Operation::Flush};
        case kTypeGetId:
            return Decision{Operation::GetId, kStatusOk, 0, std::min<std::uint64_t>(request.in_bytes, kIdBytes)};
        case kTypeDiscard:
            return zeroing(request, disk, /*discard=*/true);
        case kTypeWriteZeroes:
            return zeroing(request, disk, /*discard=*/false);
        default:
            return answer(kStatusUnsupp);
    }
}

}  // namespace sbx::virtio::blk

// The virtio-blk request format (virtio 1.2 §5.2.3, §5.2.4, §5.2.6) and
// what a request asks of the disk, decided without touching the disk or
// guest memory: Block (blk.cpp) executes the decision, the unit test and
// the fuzz target check it alone.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace sbx::virtio {

// The wire format (§5.2.3, §5.2.4, §5.2.6), little-endian like the host.
namespace blk {
inline constexpr std::uint64_t kFeatureSegMax = 1ULL << 2;        // VIRTIO_BLK_F_SEG_MAX
inline constexpr std::uint64_t kFeatureRo = 1ULL << 5;            // VIRTIO_BLK_F_RO
inline constexpr std::uint64_t kFeatureBlkSize = 1ULL << 6;       // VIRTIO_BLK_F_BLK_SIZE
inline constexpr std::uint64_t kFeatureFlush = 1ULL << 9;         // VIRTIO_BLK_F_FLUSH
inline constexpr std::uint64_t kFeatureDiscard = 1ULL << 13;      // VIRTIO_BLK_F_DISCARD
inline constexpr std::uint64_t kFeatureWriteZeroes = 1ULL << 14;  // VIRTIO_BLK_F_WRITE_ZEROES

inline constexpr std::uint32_t kTypeIn = 0;
inline constexpr std::uint32_t kTypeOut = 1;
inline constexpr std::uint32_t kTypeFlush = 4;
inline constexpr std::uint32_t kTypeGetId = 8;
inline constexpr std::uint32_t kTypeDiscard = 11;
inline constexpr std::uint32_t kTypeWriteZeroes = 13;

inline constexpr std::uint8_t kStatusOk = 0;
inline constexpr std::uint8_t kStatusIoErr = 1;
inline constexpr std::uint8_t kStatusUnsupp = 2;

inline constexpr std::uint64_t kSectorSize = 512;
inline constexpr std::size_t kIdBytes = 20;                  // VIRTIO_BLK_ID_BYTES
inline constexpr std::uint32_t kFlagUnmap = 1;               // virtio_blk_discard_write_zeroes.flags
inline constexpr std::uint32_t kMaxRangeSectors = 1U << 22;  // per discard / write-zeroes (2 GiB)

// struct virtio_blk_req up to the data (§5.2.6).
struct RequestHeader {
    std::uint32_t type;
    std::uint32_t reserved;
    std::uint64_t sector;
};
static_assert(sizeof(RequestHeader) == 16);

// struct virtio_blk_discard_write_zeroes (§5.2.6).
struct DiscardWriteZeroes {
    std::uint64_t sector;
    std::uint32_t num_sectors;
    std::uint32_t flags;
};
static_assert(sizeof(DiscardWriteZeroes) == 16);

// struct virtio_blk_config (§5.2.4) up to write_zeroes_may_unmap; the
// secure-erase and zoned fields that follow are not offered.
struct ConfigSpace {
    std::uint64_t capacity;
    std::uint32_t size_max;
    std::uint32_t seg_max;
    std::uint16_t cylinders;
    std::uint8_t heads;
    std::uint8_t sectors;
    std::uint32_t blk_size;
    std::uint8_t physical_block_exp;
    std::uint8_t alignment_offset;
    std::uint16_t min_io_size;
    std::uint32_t opt_io_size;
    std::uint8_t writeback;
    std::uint8_t unused0;
    std::uint16_t num_queues;
    std::uint32_t max_discard_sectors;
    std::uint32_t max_discard_seg;
    std::uint32_t discard_sector_alignment;
    std::uint32_t max_write_zeroes_sectors;
    std::uint32_t max_write_zeroes_seg;
    std::uint8_t write_zeroes_may_unmap;
    std::array<std::uint8_t, 3> unused1;
};
inline constexpr std::size_t kConfigSpaceBytes = 60;  // sizeof rounds up to 64

// A request as its chain carries it: the header's fields, how many data
// bytes there are each way, and the one discard/write-zeroes segment when
// the device-readable data is exactly one.
struct RequestShape {
    std::uint32_t type = 0;
    std::uint64_t sector = 0;
    std::uint64_t in_bytes = 0;   // device-writable data before the status byte
    std::uint64_t out_bytes = 0;  // device-readable data after the header
    std::optional<DiscardWriteZeroes> range = std::nullopt;
};

// What the decision needs to know of the disk.
struct DiskShape {
    std::uint64_t capacity_sectors = 0;
    bool read_only = false;
    std::uint64_t features = 0;  // negotiated (discard and write-zeroes)
};

enum class Operation { Answer, Read, Write, Flush, GetId, Discard, WriteZeroes };

// The decision: answer `status` at once (Answer), or carry out `op` on the
// byte range [offset, offset + length) of the disk, which lies inside it.
struct Decision {
    Operation op = Operation::Answer;
    std::uint8_t status = kStatusOk;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    bool unmap = false;  // write-zeroes may leave a hole
    bool operator==(const Decision&) const = default;
};

[[nodiscard]] Decision decide(const RequestShape& request, const DiskShape& disk);

}  // namespace blk
}  // namespace sbx::virtio

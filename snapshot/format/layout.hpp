// The on-disk layout (docs/snapshot-format.md): the fixed header at offset 0
// and the trailer (section table, memory regions, memory index, working set)
// that the header points to. Decoding validates everything as untrusted
// input; every error starts with its code word (types.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "snapshot/format/types.hpp"

namespace sbx::snapshot::layout {

inline constexpr std::array<std::uint8_t, 8> kMagic = {'S', 'B', 'X', 'S', 'N', 'A', 'P', '\0'};
inline constexpr std::uint32_t kHeaderBytes = 128;
// Sections start here; the rest of the first page stays zero.
inline constexpr std::uint64_t kDataStart = kPageSize;
inline constexpr std::size_t kNameBytes = 16;  // arch and CPU vendor fields, NUL-padded
inline constexpr std::size_t kMaxSectionName = 64;
inline constexpr std::uint32_t kMaxSections = 4096;
inline constexpr std::uint64_t kMaxSectionBytes = 256ULL << 20;
inline constexpr std::uint32_t kMaxRegions = 1024;
inline constexpr std::uint64_t kMaxTrailerBytes = 256ULL << 20;

enum class ChunkKind : std::uint8_t { Zero = 0, Zstd = 1, Plain = 2 };

struct Header {
    SnapshotInfo info;
    std::uint64_t trailer_offset = 0;
    std::uint64_t trailer_bytes = 0;
    std::uint64_t trailer_checksum = 0;
    std::uint64_t file_bytes = 0;
};

struct SectionEntry {
    std::string name;
    std::uint64_t offset = 0, bytes = 0, checksum = 0;
};

struct RegionEntry {
    std::uint64_t guest_start = 0, length = 0;
    std::uint64_t file_offset = 0;  // raw mode: page-aligned start of the region's bytes; else 0
};

struct ChunkEntry {
    ChunkKind kind = ChunkKind::Zero;
    std::uint64_t guest_start = 0;
    std::uint32_t length = 0;
    std::uint64_t file_offset = 0;   // 0 for zero runs
    std::uint32_t stored_bytes = 0;  // 0 for zero runs
    std::uint64_t checksum = 0;      // XXH3-64 of the stored bytes; 0 for zero runs
};

struct Trailer {
    std::vector<SectionEntry> sections;
    std::vector<RegionEntry> regions;
    std::vector<ChunkEntry> chunks;
    std::vector<GuestRange> working_set;
};

// XXH3-64 with seed 0.
std::uint64_t checksum(std::span<const std::uint8_t> bytes);

// Writer-side checks of the info fields (also applied by decode_header).
Result<void> check_info(const SnapshotInfo& info);

std::array<std::uint8_t, kHeaderBytes> encode_header(const Header& header);
// `bytes` is the start of the file (up to kHeaderBytes), `file_size` its real size.
Result<Header> decode_header(std::span<const std::uint8_t> bytes, std::uint64_t file_size);

std::vector<std::uint8_t> encode_trailer(const Trailer& trailer);
// Parses the trailer (already checksummed) and validates its structure
// against the header: sections, regions and chunks inside the data area and
// not overlapping each other, chunks tiling the regions exactly.
Result<Trailer> decode_trailer(std::span<const std::uint8_t> bytes, const Header& header);

// Checks that ranges lie inside the regions (ascending, from a decoded trailer).
Result<void> check_working_set(std::span<const GuestRange> ranges, std::span<const RegionEntry> regions);

}  // namespace sbx::snapshot::layout

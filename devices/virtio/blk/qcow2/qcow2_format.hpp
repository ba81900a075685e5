// The qcow2 on-disk format (QEMU docs/interop/qcow2.txt), version 3: the
// header, its extensions, and the L1 / L2 / refcount entry bits. All
// numbers on disk are big-endian. parse_header() validates everything the
// first cluster says against the file's size and sane limits, so nothing
// later allocates or reads from an unchecked header field.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/result.hpp"

namespace sbx::qcow2 {

// Error codes (Error::code) of this library.
inline constexpr std::string_view kCodeCorrupt = "qcow2_corrupt";          // malformed or hostile metadata
inline constexpr std::string_view kCodeUnsupported = "qcow2_unsupported";  // valid, a feature we refuse
inline constexpr std::string_view kCodeBacking = "qcow2_backing";          // the backing chain cannot open
inline constexpr std::string_view kCodeFull = "qcow2_full";                // no room to allocate

inline constexpr std::uint32_t kMagic = 0x514649fb;  // "QFI\xfb"
inline constexpr std::uint32_t kMinClusterBits = 9;
inline constexpr std::uint32_t kMaxClusterBits = 21;  // 2 MiB, as QEMU
inline constexpr std::uint32_t kDefaultClusterBits = 16;
inline constexpr std::uint32_t kHeaderV3Bytes = 104;  // header_length of a v3 header without compression_type
inline constexpr std::uint32_t kHeaderBytes = 112;    // what we write: up to compression_type, padded to 8
inline constexpr std::uint32_t kRefcountOrder = 4;    // 16-bit refcounts, the only width we read and write
inline constexpr std::uint32_t kMaxBackingNameBytes = 1023;

// Limits on table sizes taken from the header (QEMU uses the same ones), so
// a header cannot ask for a huge allocation.
inline constexpr std::uint64_t kMaxL1Bytes = 32ULL << 20;
inline constexpr std::uint64_t kMaxRefcountTableBytes = 8ULL << 20;
inline constexpr std::uint64_t kMaxDiskBytes = 1ULL << 50;  // 1 PiB virtual size

// incompatible_features bits.
inline constexpr std::uint64_t kIncompatDirty = 1ULL << 0;
inline constexpr std::uint64_t kIncompatCorrupt = 1ULL << 1;
inline constexpr std::uint64_t kIncompatDataFile = 1ULL << 2;
inline constexpr std::uint64_t kIncompatCompression = 1ULL << 3;
inline constexpr std::uint64_t kIncompatExtendedL2 = 1ULL << 4;

// Header extension types.
inline constexpr std::uint32_t kExtEnd = 0;
inline constexpr std::uint32_t kExtBackingFormat = 0xe2792aca;
inline constexpr std::uint32_t kExtFeatureTable = 0x6803f857;
inline constexpr std::uint32_t kExtBitmaps = 0x23852875;
inline constexpr std::uint32_t kExtEncryption = 0x0537be77;
inline constexpr std::uint32_t kExtDataFile = 0x44415441;

// L1 entry: bits 9-55 the L2 table's offset, bit 63 "copied" (refcount 1).
inline constexpr std::uint64_t kOffsetMask = 0x00fffffffffffe00ULL;
inline constexpr std::uint64_t kFlagCopied = 1ULL << 63;
inline constexpr std::uint64_t kL1Reserved = 0x7f000000000001ffULL;
// Standard L2 entry: bit 0 reads as zeroes, bits 9-55 the host cluster,
// bit 62 compressed, bit 63 copied.
inline constexpr std::uint64_t kFlagZero = 1ULL << 0;
inline constexpr std::uint64_t kFlagCompressed = 1ULL << 62;
inline constexpr std::uint64_t kL2Reserved = 0x3f000000000001feULL;
// Refcount table entry: bits 9-63 the refcount block's offset.
inline constexpr std::uint64_t kRefcountTableReserved = 0x1ffULL;

enum class BackingFormat { None, Probe, Raw, Qcow2 };

struct Header {
    std::uint32_t version = 3;
    std::uint32_t cluster_bits = kDefaultClusterBits;
    std::uint64_t size = 0;  // virtual disk bytes
    std::uint32_t l1_size = 0;
    std::uint64_t l1_table_offset = 0;
    std::uint64_t refcount_table_offset = 0;
    std::uint32_t refcount_table_clusters = 0;
    std::uint64_t incompatible_features = 0;
    std::uint64_t compatible_features = 0;
    std::uint64_t autoclear_features = 0;
    std::uint32_t header_length = kHeaderBytes;
    std::string backing_name;  // empty: no backing file
    BackingFormat backing_format = BackingFormat::None;

    [[nodiscard]] std::uint64_t cluster_size() const { return 1ULL << cluster_bits; }
    // Entries in one L2 table (one cluster of u64).
    [[nodiscard]] std::uint64_t l2_entries() const { return cluster_size() / 8; }
    // 16-bit entries in one refcount block.
    [[nodiscard]] std::uint64_t refblock_entries() const { return cluster_size() / 2; }
};

// Header field offsets that are rewritten in place.
inline constexpr std::uint64_t kAutoclearOffset = 88;

// The L1 entries a disk of `size` bytes needs.
[[nodiscard]] std::uint64_t l1_entries_for(std::uint64_t size, std::uint32_t cluster_bits);

// Parses and validates the header in `first` (the file's first bytes, a
// whole cluster or the whole file if shorter) of a file of `file_bytes`.
// Unsupported features get kCodeUnsupported, anything malformed
// kCodeCorrupt; the message names the field.
[[nodiscard]] Result<Header> parse_header(std::span<const std::uint8_t> first, std::uint64_t file_bytes);

// The header cluster of a new image: the v3 header, a backing-format
// extension, the end marker and the backing file name.
[[nodiscard]] std::string encode_header(const Header& header);

inline std::uint64_t load_be64(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
        v = (v << 8) | p[i];
    }
    return v;
}
inline std::uint32_t load_be32(const std::uint8_t* p) {
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}
inline std::uint16_t load_be16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>((p[0] << 8) | p[1]);
}
inline void store_be64(std::uint8_t* p, std::uint64_t v) {
    for (int i = 7; i >= 0; --i, v >>= 8) {
        p[i] = static_cast<std::uint8_t>(v);
    }
}
inline void store_be32(std::uint8_t* p, std::uint32_t v) {
    for (int i = 3; i >= 0; --i, v >>= 8) {
        p[i] = static_cast<std::uint8_t>(v);
    }
}
inline void store_be16(std::uint8_t* p, std::uint16_t v) {
    p[0] = static_cast<std::uint8_t>(v >> 8);
    p[1] = static_cast<std::uint8_t>(v);
}

}  // namespace sbx::qcow2

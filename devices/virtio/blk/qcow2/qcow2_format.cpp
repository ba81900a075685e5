#include "devices/virtio/blk/qcow2/qcow2_format.hpp"

#include <cstring>

namespace sbx::qcow2 {
namespace {

Error corrupt(std::string message) {
    return Error{std::move(message), 0, std::string(kCodeCorrupt)};
}
Error unsupported(std::string message) {
    return Error{std::move(message), 0, std::string(kCodeUnsupported)};
}

bool aligned(std::uint64_t offset, std::uint32_t cluster_bits) {
    return (offset & ((1ULL << cluster_bits) - 1)) == 0;
}

// [offset, offset + bytes) lies inside a file of file_bytes.
bool in_file(std::uint64_t offset, std::uint64_t bytes, std::uint64_t file_bytes) {
    return offset <= file_bytes && bytes <= file_bytes - offset;
}

// The header extensions from header_length to `end` (qcow2.txt "Header
// extensions"): type, length, data padded to 8 bytes, until type 0.
Result<void> parse_extensions(std::span<const std::uint8_t> first, std::uint64_t end, Header& h) {
    std::uint64_t pos = h.header_length;
    while (true) {
        if (pos + 8 > end) {
            return corrupt(fmt::format("header extension at {} runs past {}", pos, end));
        }
        const std::uint32_t type = load_be32(&first[pos]);
        const std::uint32_t length = load_be32(&first[pos + 4]);
        pos += 8;
        if (type == kExtEnd) {
            return ok();
        }
        const std::uint64_t padded = (std::uint64_t{length} + 7) & ~7ULL;
        if (padded > end - pos) {
            return corrupt(fmt::format("header extension {:#x} of {} bytes runs past {}", type, length, end));
        }
        const auto* data = &first[pos];
        switch (type) {
            case kExtBackingFormat: {
                const std::string_view format(reinterpret_cast<const char*>(data), length);
                if (format == "raw") {
                    h.backing_format = BackingFormat::Raw;
                } else if (format == "qcow2") {
                    h.backing_format = BackingFormat::Qcow2;
                } else {
                    return unsupported(fmt::format("backing format \"{}\" (only raw and qcow2)",
                                                   std::string(format.substr(0, 32))));
                }
                break;
            }
            case kExtEncryption:
                return unsupported("encryption (full disk encryption header extension)");
            case kExtDataFile:
                return unsupported("an external data file");
            case kExtFeatureTable:  // names for feature bits; we know the bits we accept
            case kExtBitmaps:       // covered by autoclear bit 0, cleared when we write
            default:                // unknown extensions may be ignored
                break;
        }
        pos += padded;
    }
}

}  // namespace

std::uint64_t l1_entries_for(std::uint64_t size, std::uint32_t cluster_bits) {
    const std::uint32_t shift = cluster_bits + (cluster_bits - 3);  // bytes one L2 table maps
    return (size + (1ULL << shift) - 1) >> shift;
}

Result<Header> parse_header(std::span<const std::uint8_t> first, std::uint64_t file_bytes) {
    if (first.size() < kHeaderV3Bytes || first.size() > file_bytes) {
        return corrupt(fmt::format("a {}-byte file is too short for a qcow2 header", file_bytes));
    }
    const std::uint8_t* p = first.data();
    if (load_be32(p) != kMagic) {
        return corrupt("no qcow2 magic");
    }
    Header h;
    h.version = load_be32(p + 4);
    if (h.version != 3) {
        return unsupported(fmt::format("qcow2 version {} (only 3)", h.version));
    }
    const std::uint64_t backing_offset = load_be64(p + 8);
    const std::uint32_t backing_bytes = load_be32(p + 16);
    h.cluster_bits = load_be32(p + 20);
    h.size = load_be64(p + 24);
    const std::uint32_t crypt_method = load_be32(p + 32);
    h.l1_size = load_be32(p + 36);
    h.l1_table_offset = load_be64(p + 40);
    h.refcount_table_offset = load_be64(p + 48);
    h.refcount_table_clusters = load_be32(p + 56);
    const std::uint32_t snapshots = load_be32(p + 60);
    h.incompatible_features = load_be64(p + 72);
    h.compatible_features = load_be64(p + 80);
    h.autoclear_features = load_be64(p + 88);
    const std::uint32_t refcount_order = load_be32(p + 96);
    h.header_length = load_be32(p + 100);

    if (h.cluster_bits < kMinClusterBits || h.cluster_bits > kMaxClusterBits) {
        return corrupt(fmt::format("cluster_bits {} is outside {}..{}", h.cluster_bits, kMinClusterBits,
                                   kMaxClusterBits));
    }
    const std::uint64_t cluster = h.cluster_size();
    if (first.size() < std::min<std::uint64_t>(cluster, file_bytes)) {
        return corrupt("the header cluster was not read whole");
    }
    if (crypt_method != 0) {
        return unsupported(fmt::format("encryption (crypt_method {})", crypt_method));
    }
    if (snapshots != 0) {
        return unsupported(fmt::format("internal snapshots ({})", snapshots));
    }
    // incompatible_features: every set bit is a feature we must understand.
    const std::uint64_t incompat = h.incompatible_features;
    if ((incompat & kIncompatDirty) != 0) {
        return unsupported("the dirty bit (refcounts need a repair: qemu-img check -r all)");
    }
    if ((incompat & kIncompatCorrupt) != 0) {
        return unsupported("the corrupt bit (qemu-img check -r all)");
    }
    if ((incompat & kIncompatDataFile) != 0) {
        return unsupported("an external data file");
    }
    if ((incompat & kIncompatCompression) != 0) {
        return unsupported("a compression type other than zlib");
    }
    if ((incompat & kIncompatExtendedL2) != 0) {
        return unsupported("extended L2 entries (subclusters)");
    }
    if (incompat != 0) {
        return unsupported(fmt::format("unknown incompatible features {:#x}", incompat));
    }
    if (refcount_order != kRefcountOrder) {
        return unsupported(
            fmt::format("refcount_order {} (only {}: 16-bit refcounts)", refcount_order, kRefcountOrder));
    }
    if (h.header_length < kHeaderV3Bytes ||
        h.header_length > std::min<std::uint64_t>(cluster, first.size())) {
        return corrupt(fmt::format("header_length {} is outside {}..{}", h.header_length, kHeaderV3Bytes,
                                   std::min<std::uint64_t>(cluster, first.size())));
    }
    if (h.header_length > kHeaderV3Bytes && p[104] != 0) {
        return unsupported(fmt::format("compression_type {}", p[104]));
    }
    if (h.size > kMaxDiskBytes || h.size % 512 != 0) {
        return corrupt(
            fmt::format("disk size {} is not a whole number of sectors up to {}", h.size, kMaxDiskBytes));
    }
    // The L1 table: cluster-aligned, large enough for the disk, in the file.
    const std::uint64_t l1_needed = l1_entries_for(h.size, h.cluster_bits);
    if (h.l1_size < l1_needed || std::uint64_t{h.l1_size} * 8 > kMaxL1Bytes) {
        return corrupt(fmt::format("l1_size {} for a disk that needs {} entries", h.l1_size, l1_needed));
    }
    if (h.l1_size > 0 && (!aligned(h.l1_table_offset, h.cluster_bits) || h.l1_table_offset == 0 ||
                          !in_file(h.l1_table_offset, std::uint64_t{h.l1_size} * 8, file_bytes))) {
        return corrupt(fmt::format("l1_table_offset {:#x} of {} entries is not a cluster in the file",
                                   h.l1_table_offset, h.l1_size));
    }
    const std::uint64_t refcount_table_bytes = std::uint64_t{h.refcount_table_clusters} * cluster;
    if (h.refcount_table_clusters == 0 || refcount_table_bytes > kMaxRefcountTableBytes ||
        h.refcount_table_offset == 0 || !aligned(h.refcount_table_offset, h.cluster_bits) ||
        !in_file(h.refcount_table_offset, refcount_table_bytes, file_bytes)) {
        return corrupt(fmt::format("refcount table at {:#x} of {} clusters is not in the file",
                                   h.refcount_table_offset, h.refcount_table_clusters));
    }
    // The backing file name: at most 1023 bytes, in the file.
    if (backing_offset != 0) {
        if (backing_bytes == 0 || backing_bytes > kMaxBackingNameBytes ||
            !in_file(backing_offset, backing_bytes, first.size())) {
            return corrupt(fmt::format("backing file name at {} of {} bytes is not in the header cluster",
                                       backing_offset, backing_bytes));
        }
        h.backing_name.assign(reinterpret_cast<const char*>(&first[backing_offset]), backing_bytes);
        if (h.backing_name.find('\0') != std::string::npos) {
            return corrupt("the backing file name holds a NUL byte");
        }
        h.backing_format = BackingFormat::Probe;
    }
    // Extensions end where the backing name starts, or with the cluster.
    std::uint64_t extensions_end = first.size();
    if (backing_offset != 0 && backing_offset >= h.header_length) {
        extensions_end = backing_offset;
    }
    const BackingFormat named = h.backing_format;
    if (auto r = parse_extensions(first, extensions_end, h); !r) {
        return r.error();
    }
    if (named == BackingFormat::None && h.backing_format != BackingFormat::None) {
        h.backing_format = BackingFormat::None;  // a format without a file names nothing
    }
    return h;
}

std::string encode_header(const Header& h) {
    std::string out(h.cluster_size(), '\0');
    auto* p = reinterpret_cast<std::uint8_t*>(out.data());
    store_be32(p, kMagic);
    store_be32(p + 4, 3);
    store_be32(p + 20, h.cluster_bits);
    store_be64(p + 24, h.size);
    store_be32(p + 36, h.l1_size);
    store_be64(p + 40, h.l1_table_offset);
    store_be64(p + 48, h.refcount_table_offset);
    store_be32(p + 56, h.refcount_table_clusters);
    store_be64(p + 72, h.incompatible_features);
    store_be64(p + 80, h.compatible_features);
    store_be64(p + 88, h.autoclear_features);
    store_be32(p + 96, kRefcountOrder);
    store_be32(p + 100, kHeaderBytes);  // byte 104, compression_type, stays 0: zlib
    std::uint64_t pos = kHeaderBytes;
    if (!h.backing_name.empty()) {
        const std::string_view format = h.backing_format == BackingFormat::Qcow2 ? "qcow2" : "raw";
        store_be32(p + pos, kExtBackingFormat);
        store_be32(p + pos + 4, static_cast<std::uint32_t>(format.size()));
        std::memcpy(p + pos + 8, format.data(), format.size());
        pos += 8 + ((format.size() + 7) & ~std::size_t{7});
    }
    pos += 8;  // the end-of-extensions marker: type 0, length 0
    if (!h.backing_name.empty()) {
        store_be64(p + 8, pos);
        store_be32(p + 16, static_cast<std::uint32_t>(h.backing_name.size()));
        std::memcpy(p + pos, h.backing_name.data(), h.backing_name.size());
    }
    return out;
}

}  // namespace sbx::qcow2

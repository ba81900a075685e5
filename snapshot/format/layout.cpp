#include "snapshot/format/layout.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "base/byte_codec.hpp"

namespace sbx::snapshot::layout {

namespace {

// Bytes of the header covered by its checksum (everything before the checksum field).
constexpr std::size_t kHeaderChecksummed = kHeaderBytes - 8;
constexpr std::size_t kSectionEntryMin = 4 + 8 + 8 + 8;
constexpr std::size_t kRegionEntryBytes = 8 + 8 + 8;
constexpr std::size_t kChunkEntryBytes = 1 + 8 + 4 + 8 + 4 + 8;
constexpr std::size_t kRangeBytes = 8 + 8;

void put_name(ByteWriter& w, const std::string& name) {
    std::array<std::uint8_t, kNameBytes> field{};
    std::memcpy(field.data(), name.data(), std::min(name.size(), kNameBytes - 1));
    w.raw(field);
}

// A NUL-padded name: printable ASCII, then only NULs.
bool get_name(ByteReader& r, std::string& out) {
    auto field = r.raw(kNameBytes);
    if (field.size() != kNameBytes) {
        return false;
    }
    std::size_t n = 0;
    while (n < kNameBytes && field[n] != 0) {
        if (field[n] < 0x20 || field[n] > 0x7e) {
            return false;
        }
        ++n;
    }
    if (n == kNameBytes || std::any_of(field.begin() + static_cast<std::ptrdiff_t>(n), field.end(),
                                       [](std::uint8_t b) { return b != 0; })) {
        return false;
    }
    out.assign(reinterpret_cast<const char*>(field.data()), n);
    return true;
}

// [offset, offset + length) inside [lo, hi), without overflow.
bool inside(std::uint64_t offset, std::uint64_t length, std::uint64_t lo, std::uint64_t hi) {
    return offset >= lo && offset <= hi && length <= hi - offset;
}

struct Extent {
    std::uint64_t offset, length;
};

Result<void> check_no_overlap(std::vector<Extent>& extents) {
    std::sort(extents.begin(), extents.end(),
              [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
    std::uint64_t end = 0;
    for (const auto& e : extents) {
        if (e.length == 0) {
            continue;
        }
        if (e.offset < end) {
            return format_error("corrupt", "file ranges overlap at offset {}", e.offset);
        }
        end = e.offset + e.length;
    }
    return ok();
}

Result<void> check_sections(const Trailer& t, const Header& h, std::vector<Extent>& extents) {
    std::vector<std::string_view> names;
    names.reserve(t.sections.size());
    for (const auto& s : t.sections) {
        if (s.name.empty()) {
            return format_error("corrupt", "a section has an empty name");
        }
        if (s.bytes > kMaxSectionBytes || !inside(s.offset, s.bytes, kDataStart, h.trailer_offset)) {
            return format_error("corrupt", "section {} ({} bytes at {}) lies outside the data area", s.name,
                              s.bytes, s.offset);
        }
        extents.push_back({s.offset, s.bytes});
        names.push_back(s.name);
    }
    std::sort(names.begin(), names.end());
    if (auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end()) {
        return format_error("corrupt", "section {} appears twice", *dup);
    }
    return ok();
}

Result<void> check_regions(const Trailer& t, const Header& h, std::vector<Extent>& extents) {
    std::uint64_t prev_end = 0;
    for (std::size_t i = 0; i < t.regions.size(); ++i) {
        const auto& r = t.regions[i];
        if (r.length == 0 || r.guest_start % kPageSize != 0 || r.length % kPageSize != 0 ||
            r.length > UINT64_MAX - r.guest_start) {
            return format_error("corrupt", "memory region {} ({:#x}+{:#x}) is empty, unaligned or wraps", i,
                              r.guest_start, r.length);
        }
        if (i > 0 && r.guest_start < prev_end) {
            return format_error("corrupt", "memory region {} at {:#x} overlaps or precedes the one before", i,
                              r.guest_start);
        }
        prev_end = r.guest_start + r.length;
        if (h.info.mode == MemoryMode::Raw) {
            if (r.file_offset % kPageSize != 0 ||
                !inside(r.file_offset, r.length, kDataStart, h.trailer_offset)) {
                return format_error("corrupt",
                    "raw memory region {} at file offset {} is unaligned or outside the file", i,
                    r.file_offset);
            }
            extents.push_back({r.file_offset, r.length});
        } else if (r.file_offset != 0) {
            return format_error("corrupt", "memory region {} has a file offset in compressed mode", i);
        }
    }
    return ok();
}

Result<void> check_chunk(const ChunkEntry& c, const RegionEntry& r, std::uint64_t cursor, const Header& h,
                         std::vector<Extent>& extents) {
    const std::uint64_t chunk = h.info.chunk_size;
    const std::uint64_t left = r.guest_start + r.length - cursor;
    const std::uint64_t rel = cursor - r.guest_start;
    if (c.guest_start != cursor || rel % chunk != 0 || c.length == 0 || c.length > left) {
        return format_error("corrupt",
            "memory index entry at {:#x} (+{:#x}) does not continue the region at {:#x}",
            c.guest_start, c.length, cursor);
    }
    if (c.kind == ChunkKind::Zero) {
        if (c.length > kMaxZeroRun || (c.length % chunk != 0 && c.length != left) || c.file_offset != 0 ||
            c.stored_bytes != 0) {
            return format_error("corrupt", "zero range at {:#x} has a bad length or stored data", cursor);
        }
        return ok();
    }
    if (c.length != std::min(chunk, left)) {
        return format_error("corrupt", "chunk at {:#x} is {} bytes, not the chunk size", cursor, c.length);
    }
    if (c.kind == ChunkKind::Plain) {
        if (c.stored_bytes != c.length) {
            return format_error("corrupt", "uncompressed chunk at {:#x} stores {} of {} bytes", cursor,
                              c.stored_bytes, c.length);
        }
        if (h.info.mode == MemoryMode::Raw) {
            if (c.file_offset != r.file_offset + rel) {
                return format_error("corrupt", "raw chunk at {:#x} is not at its region's file offset", cursor);
            }
            return ok();  // inside the region's extent
        }
    } else if (c.kind == ChunkKind::Zstd) {
        if (h.info.mode != MemoryMode::Compressed || c.stored_bytes == 0 || c.stored_bytes >= c.length) {
            return format_error("corrupt", "compressed chunk at {:#x} has a bad stored size {}", cursor,
                              c.stored_bytes);
        }
    } else {
        return format_error("corrupt", "memory index entry at {:#x} has unknown kind {}", cursor,
                          static_cast<unsigned>(c.kind));
    }
    if (!inside(c.file_offset, c.stored_bytes, kDataStart, h.trailer_offset)) {
        return format_error("corrupt", "chunk at {:#x} ({} bytes at {}) lies outside the data area", cursor,
                          c.stored_bytes, c.file_offset);
    }
    extents.push_back({c.file_offset, c.stored_bytes});
    return ok();
}

Result<void> check_chunks(const Trailer& t, const Header& h, std::vector<Extent>& extents) {
    std::size_t next = 0;
    for (const auto& r : t.regions) {
        const std::uint64_t end = r.guest_start + r.length;
        for (std::uint64_t cursor = r.guest_start; cursor < end;) {
            if (next == t.chunks.size()) {
                return format_error("corrupt", "the memory index ends inside the region at {:#x}", r.guest_start);
            }
            const auto& c = t.chunks[next++];
            if (auto checked = check_chunk(c, r, cursor, h, extents); !checked) {
                return checked;
            }
            cursor += c.length;
        }
    }
    if (next != t.chunks.size()) {
        return format_error("corrupt", "{} memory index entries lie beyond the last region",
                          t.chunks.size() - next);
    }
    return ok();
}

}  // namespace

std::uint64_t checksum(std::span<const std::uint8_t> bytes) {
    return XXH3_64bits(bytes.data(), bytes.size());
}

Result<void> check_info(const SnapshotInfo& info) {
    if (info.chunk_size < kMinChunkSize || info.chunk_size > kMaxChunkSize ||
        info.chunk_size % kPageSize != 0) {
        return make_error("chunk size {} is not a multiple of 4 KiB in 64 KiB..1 MiB", info.chunk_size);
    }
    if (info.mode != MemoryMode::Compressed && info.mode != MemoryMode::Raw) {
        return make_error("unknown memory mode {}", static_cast<std::uint32_t>(info.mode));
    }
    return ok();
}

std::array<std::uint8_t, kHeaderBytes> encode_header(const Header& h) {
    ByteWriter w;
    w.raw(kMagic);
    w.u32(h.info.format_version);
    w.u32(kHeaderBytes);
    put_name(w, h.info.arch);
    put_name(w, h.info.cpu.vendor);
    w.u32(h.info.cpu.family);
    w.u32(h.info.cpu.model);
    w.u32(h.info.cpu.stepping);
    w.u32(static_cast<std::uint32_t>(h.info.mode));
    w.u64(h.info.cpu.cpuid_hash);
    w.u32(h.info.chunk_size);
    w.u32(0);
    w.u64(h.info.created_unix_ms);
    w.u64(h.trailer_offset);
    w.u64(h.trailer_bytes);
    w.u64(h.trailer_checksum);
    w.u64(h.file_bytes);
    w.u64(checksum(w.bytes()));
    std::array<std::uint8_t, kHeaderBytes> out{};
    std::copy(w.bytes().begin(), w.bytes().end(), out.begin());
    return out;
}

Result<Header> decode_header(std::span<const std::uint8_t> bytes, std::uint64_t file_size) {
    if (file_size < 12 || bytes.size() < 12) {
        return format_error("truncated", "the file is {} bytes, shorter than a snapshot header", file_size);
    }
    if (!std::equal(kMagic.begin(), kMagic.end(), bytes.begin())) {
        return format_error("bad_magic", "not a sandboxer snapshot");
    }
    ByteReader r(bytes.first(std::min<std::size_t>(bytes.size(), kHeaderBytes)));
    r.raw(kMagic.size());
    Header h;
    h.info.format_version = r.u32();
    if (h.info.format_version != kFormatVersion) {
        return format_error("unsupported_version", "format version {} (this reader knows {})",
                          h.info.format_version, kFormatVersion);
    }
    if (bytes.size() < kHeaderBytes) {
        return format_error("truncated", "the file is {} bytes, shorter than the {}-byte header", file_size,
                          kHeaderBytes);
    }
    if (auto size = r.u32(); size != kHeaderBytes) {
        return format_error("corrupt", "header size {} (version 1 headers are {})", size, kHeaderBytes);
    }
    const std::uint64_t stored_sum = ByteReader(bytes.subspan(kHeaderChecksummed, 8)).u64();
    if (stored_sum != checksum(bytes.first(kHeaderChecksummed))) {
        return format_error("checksum_mismatch", "snapshot header");
    }
    bool names_ok = get_name(r, h.info.arch);
    names_ok = get_name(r, h.info.cpu.vendor) && names_ok;
    h.info.cpu.family = r.u32();
    h.info.cpu.model = r.u32();
    h.info.cpu.stepping = r.u32();
    h.info.mode = static_cast<MemoryMode>(r.u32());
    h.info.cpu.cpuid_hash = r.u64();
    h.info.chunk_size = r.u32();
    const auto reserved = r.u32();
    h.info.created_unix_ms = r.u64();
    h.trailer_offset = r.u64();
    h.trailer_bytes = r.u64();
    h.trailer_checksum = r.u64();
    h.file_bytes = r.u64();
    if (!names_ok || reserved != 0) {
        return format_error("corrupt", "header name fields or reserved bytes are malformed");
    }
    if (h.info.arch != kHostArch) {
        return format_error("wrong_arch", "snapshot is for {}, this host is {}", h.info.arch, kHostArch);
    }
    if (auto checked = check_info(h.info); !checked) {
        return checked.error().context("corrupt").with_code("corrupt");
    }
    if (file_size < h.file_bytes) {
        return format_error("truncated", "the file is {} bytes, the header says {}", file_size, h.file_bytes);
    }
    if (file_size > h.file_bytes) {
        return format_error("corrupt", "the file is {} bytes, the header says {}", file_size, h.file_bytes);
    }
    if (h.trailer_bytes > kMaxTrailerBytes ||
        !inside(h.trailer_offset, h.trailer_bytes, kDataStart, file_size) ||
        h.trailer_offset + h.trailer_bytes != file_size) {
        return format_error("corrupt", "trailer ({} bytes at {}) does not end the {}-byte file", h.trailer_bytes,
                          h.trailer_offset, file_size);
    }
    return h;
}

std::vector<std::uint8_t> encode_trailer(const Trailer& t) {
    ByteWriter w;
    w.u32(static_cast<std::uint32_t>(t.sections.size()));
    for (const auto& s : t.sections) {
        w.string(s.name);
        w.u64(s.offset);
        w.u64(s.bytes);
        w.u64(s.checksum);
    }
    w.u32(static_cast<std::uint32_t>(t.regions.size()));
    for (const auto& r : t.regions) {
        w.u64(r.guest_start);
        w.u64(r.length);
        w.u64(r.file_offset);
    }
    w.u32(static_cast<std::uint32_t>(t.chunks.size()));
    for (const auto& c : t.chunks) {
        w.u8(static_cast<std::uint8_t>(c.kind));
        w.u64(c.guest_start);
        w.u32(c.length);
        w.u64(c.file_offset);
        w.u32(c.stored_bytes);
        w.u64(c.checksum);
    }
    w.u32(static_cast<std::uint32_t>(t.working_set.size()));
    for (const auto& g : t.working_set) {
        w.u64(g.start);
        w.u64(g.length);
    }
    return w.take();
}

Result<Trailer> decode_trailer(std::span<const std::uint8_t> bytes, const Header& h) {
    ByteReader r(bytes);
    Trailer t;
    t.sections.resize(r.count(kSectionEntryMin, kMaxSections));
    for (auto& s : t.sections) {
        s.name = r.string(kMaxSectionName);
        s.offset = r.u64();
        s.bytes = r.u64();
        s.checksum = r.u64();
    }
    t.regions.resize(r.count(kRegionEntryBytes, kMaxRegions));
    for (auto& g : t.regions) {
        g.guest_start = r.u64();
        g.length = r.u64();
        g.file_offset = r.u64();
    }
    t.chunks.resize(r.count(kChunkEntryBytes, UINT32_MAX));
    for (auto& c : t.chunks) {
        c.kind = static_cast<ChunkKind>(r.u8());
        c.guest_start = r.u64();
        c.length = r.u32();
        c.file_offset = r.u64();
        c.stored_bytes = r.u32();
        c.checksum = r.u64();
    }
    t.working_set.resize(r.count(kRangeBytes, UINT32_MAX));
    for (auto& g : t.working_set) {
        g.start = r.u64();
        g.length = r.u64();
    }
    if (auto finished = r.finish("corrupt: snapshot trailer"); !finished) {
        return finished.error().with_code("corrupt");
    }
    std::vector<Extent> extents;
    if (auto c = check_sections(t, h, extents); !c) {
        return c.error();
    }
    if (auto c = check_regions(t, h, extents); !c) {
        return c.error();
    }
    if (auto c = check_chunks(t, h, extents); !c) {
        return c.error();
    }
    if (auto c = check_no_overlap(extents); !c) {
        return c.error();
    }
    if (auto c = check_working_set(t.working_set, t.regions); !c) {
        return c.error();
    }
    return t;
}

Result<void> check_working_set(std::span<const GuestRange> ranges, std::span<const RegionEntry> regions) {
    for (const auto& g : ranges) {
        auto it = std::upper_bound(regions.begin(), regions.end(), g.start,
                                   [](std::uint64_t a, const RegionEntry& r) { return a < r.guest_start; });
        bool ok_range = g.length > 0 && it != regions.begin();
        if (ok_range) {
            const auto& r = *std::prev(it);
            ok_range = g.start - r.guest_start < r.length && g.length <= r.length - (g.start - r.guest_start);
        }
        if (!ok_range) {
            return format_error("corrupt", "working-set range {:#x}+{:#x} is empty or outside guest memory",
                              g.start, g.length);
        }
    }
    return ok();
}

}  // namespace sbx::snapshot::layout

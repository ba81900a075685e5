#include "snapshot/format/reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace sbx::snapshot {

namespace {

using layout::ChunkEntry;
using layout::ChunkKind;

Result<void> pread_all(int fd, std::uint8_t* data, std::size_t size, std::uint64_t offset) {
    std::size_t done = 0;
    while (done < size) {
        ssize_t n = ::pread(fd, data + done, size - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return sys_error("io: read {} bytes at offset {}", size, offset).with_code("io");
        }
        if (n == 0) {
            return format_error("truncated", "the file ends before offset {}", offset + size);
        }
        done += static_cast<std::size_t>(n);
    }
    return ok();
}

struct DctxFree {
    void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_DCtx* thread_dctx() {
    thread_local std::unique_ptr<ZSTD_DCtx, DctxFree> dctx(ZSTD_createDCtx());
    return dctx.get();
}

}  // namespace

std::string_view error_code(const Error& error) {
    return error.code;
}

Result<SnapshotReader> SnapshotReader::open(const std::string& path) {
    auto fd = UniqueFd::open(path, O_RDONLY);
    if (!fd) {
        return fd.error().context("io").with_code("io");
    }
    auto reader = open_fd(std::move(*fd));
    if (!reader) {
        Error e = reader.error();
        auto word = error_code(e);
        e.message = word.empty() ? fmt::format("{}: {}", path, e.message)
                                 : fmt::format("{}: {}:{}", word, path, e.message.substr(word.size() + 1));
        return e;
    }
    return reader;
}

Result<SnapshotReader> SnapshotReader::open_fd(UniqueFd fd) {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return sys_error("io: fstat the snapshot").with_code("io");
    }
    if (!S_ISREG(st.st_mode)) {
        return format_error("io", "the snapshot is not a regular file");
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    std::array<std::uint8_t, layout::kHeaderBytes> head{};
    const auto head_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(size, head.size()));
    if (auto r = pread_all(fd.get(), head.data(), head_bytes, 0); !r) {
        return r.error();
    }
    auto header = layout::decode_header(std::span(head).first(head_bytes), size);
    if (!header) {
        return header.error();
    }
    std::vector<std::uint8_t> trailer_bytes(header->trailer_bytes);
    if (auto r = pread_all(fd.get(), trailer_bytes.data(), trailer_bytes.size(), header->trailer_offset);
        !r) {
        return r.error();
    }
    if (layout::checksum(trailer_bytes) != header->trailer_checksum) {
        return format_error("checksum_mismatch", "snapshot trailer (section table and memory index)");
    }
    auto trailer = layout::decode_trailer(trailer_bytes, *header);
    if (!trailer) {
        return trailer.error();
    }
    SnapshotReader reader;
    reader.fd_ = std::move(fd);
    reader.info_ = header->info;
    reader.file_bytes_ = header->file_bytes;
    reader.regions_ = std::move(trailer->regions);
    reader.chunks_ = std::move(trailer->chunks);
    reader.working_set_ = std::move(trailer->working_set);
    // Sections lie inside the file and do not overlap (decode_trailer), so
    // together they are no larger than the file.
    for (const auto& s : trailer->sections) {
        Section section{s.name, std::vector<std::uint8_t>(s.bytes)};
        if (auto r = pread_all(reader.fd_.get(), section.bytes.data(), section.bytes.size(), s.offset); !r) {
            return r.error();
        }
        if (layout::checksum(section.bytes) != s.checksum) {
            return format_error("checksum_mismatch", "section {}", s.name);
        }
        reader.sections_.push_back(std::move(section));
    }
    return reader;
}

std::vector<std::string> SnapshotReader::section_names() const {
    std::vector<std::string> names;
    names.reserve(sections_.size());
    for (const auto& s : sections_) {
        names.push_back(s.name);
    }
    return names;
}

Result<std::span<const std::uint8_t>> SnapshotReader::section(std::string_view name) const {
    for (const auto& s : sections_) {
        if (s.name == name) {
            return std::span<const std::uint8_t>(s.bytes);
        }
    }
    return format_error("corrupt", "no section {}", name);
}

std::vector<GuestRange> SnapshotReader::memory_regions() const {
    std::vector<GuestRange> out;
    out.reserve(regions_.size());
    for (const auto& r : regions_) {
        out.push_back({r.guest_start, r.length});
    }
    return out;
}

ChunkRef SnapshotReader::chunk(std::size_t index) const {
    if (index >= chunks_.size()) {
        return {};
    }
    const auto& c = chunks_[index];
    return {c.guest_start, c.length, c.kind == ChunkKind::Zero};
}

std::optional<std::size_t> SnapshotReader::chunk_at(std::uint64_t guest_addr) const {
    auto it = std::upper_bound(chunks_.begin(), chunks_.end(), guest_addr,
                               [](std::uint64_t a, const ChunkEntry& c) { return a < c.guest_start; });
    if (it == chunks_.begin()) {
        return std::nullopt;
    }
    --it;
    if (guest_addr - it->guest_start >= it->length) {
        return std::nullopt;  // in a gap between regions
    }
    return static_cast<std::size_t>(it - chunks_.begin());
}

Result<void> SnapshotReader::decode_chunk(const ChunkEntry& c, std::span<const std::uint8_t> stored,
                                          std::span<std::uint8_t> out) const {
    if (layout::checksum(stored) != c.checksum) {
        return format_error("checksum_mismatch", "memory chunk at {:#x}", c.guest_start);
    }
    if (c.kind == ChunkKind::Plain) {
        if (stored.data() != out.data()) {
            std::memcpy(out.data(), stored.data(), out.size());
        }
        return ok();
    }
    // zstd (RFC 8878): the frame must declare exactly the chunk's length.
    ZSTD_DCtx* dctx = thread_dctx();
    if (dctx == nullptr) {
        return format_error("io", "cannot create a zstd context");
    }
    if (ZSTD_getFrameContentSize(stored.data(), stored.size()) != c.length) {
        return format_error("corrupt", "memory chunk at {:#x} does not declare {} bytes", c.guest_start,
                          c.length);
    }
    std::size_t n = ZSTD_decompressDCtx(dctx, out.data(), out.size(), stored.data(), stored.size());
    if (ZSTD_isError(n) != 0U || n != c.length) {
        return format_error("corrupt", "memory chunk at {:#x} does not decompress to {} bytes", c.guest_start,
                          c.length);
    }
    return ok();
}

Result<void> SnapshotReader::read_chunk(std::size_t index, std::span<std::uint8_t> out) const {
    if (index >= chunks_.size() || out.size() != chunks_[index].length) {
        return format_error("invalid", "chunk {} of {} does not exist or the buffer is not its length", index,
                          chunks_.size());
    }
    const auto& c = chunks_[index];
    if (c.kind == ChunkKind::Zero) {
        std::memset(out.data(), 0, out.size());
        return ok();
    }
    if (c.kind == ChunkKind::Plain) {
        if (auto r = pread_all(fd_.get(), out.data(), out.size(), c.file_offset); !r) {
            return r;
        }
        return decode_chunk(c, out, out);
    }
    std::vector<std::uint8_t> stored(c.stored_bytes);
    if (auto r = pread_all(fd_.get(), stored.data(), stored.size(), c.file_offset); !r) {
        return r;
    }
    return decode_chunk(c, stored, out);
}

Result<std::uint64_t> SnapshotReader::raw_region_offset(std::size_t region_index) const {
    if (info_.mode != MemoryMode::Raw || region_index >= regions_.size()) {
        return format_error("invalid", "region {} has no raw file offset (raw mode, {} regions)", region_index,
                          regions_.size());
    }
    return regions_[region_index].file_offset;
}

Result<void> SnapshotReader::verify_raw_memory() const {
    if (info_.mode != MemoryMode::Raw) {
        return format_error("invalid", "not a raw-mode snapshot");
    }
    std::vector<std::uint8_t> buf(info_.chunk_size);
    for (std::size_t r = 0, i = 0; i < chunks_.size(); ++i) {
        const auto& c = chunks_[i];
        while (c.guest_start >= regions_[r].guest_start + regions_[r].length) {
            ++r;
        }
        const std::uint64_t at = regions_[r].file_offset + (c.guest_start - regions_[r].guest_start);
        if (c.kind == ChunkKind::Plain) {
            auto out = std::span(buf).first(c.length);
            if (auto rd = pread_all(fd_.get(), out.data(), out.size(), at); !rd) {
                return rd;
            }
            if (auto d = decode_chunk(c, out, out); !d) {
                return d;
            }
            continue;
        }
        for (std::uint64_t done = 0; done < c.length; done += buf.size()) {
            auto out = std::span(buf).first(std::min<std::uint64_t>(buf.size(), c.length - done));
            if (auto rd = pread_all(fd_.get(), out.data(), out.size(), at + done); !rd) {
                return rd;
            }
            if (std::any_of(out.begin(), out.end(), [](std::uint8_t b) { return b != 0; })) {
                return format_error("checksum_mismatch", "zero range at {:#x} holds data", c.guest_start + done);
            }
        }
    }
    return ok();
}

}  // namespace sbx::snapshot

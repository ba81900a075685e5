// Reading a snapshot file (docs/snapshot-format.md). open() validates the
// header, the trailer (section table, memory regions, memory index, working
// set) and every section checksum before returning; memory chunks are
// checked against their XXH3 checksum whenever they are read. Every error
// starts with its code word (types.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "base/unique_fd.hpp"
#include "snapshot/format/layout.hpp"
#include "snapshot/format/types.hpp"

namespace sbx::snapshot {

class SnapshotReader {
public:
    static Result<SnapshotReader> open(const std::string& path);
    // The same over an already open file (a memfd in the fuzzer).
    static Result<SnapshotReader> open_fd(UniqueFd fd);

    SnapshotReader(SnapshotReader&&) noexcept = default;
    SnapshotReader& operator=(SnapshotReader&&) noexcept = default;
    SnapshotReader(const SnapshotReader&) = delete;
    SnapshotReader& operator=(const SnapshotReader&) = delete;
    ~SnapshotReader() = default;

    [[nodiscard]] const SnapshotInfo& info() const { return info_; }
    [[nodiscard]] std::uint64_t file_bytes() const { return file_bytes_; }

    [[nodiscard]] std::vector<std::string> section_names() const;
    // `corrupt: no section X` when missing.
    [[nodiscard]] Result<std::span<const std::uint8_t>> section(std::string_view name) const;

    // guest_start + length of each region, in order.
    [[nodiscard]] std::vector<GuestRange> memory_regions() const;
    [[nodiscard]] std::span<const GuestRange> working_set() const { return working_set_; }

    // Eager restore: reads through io_uring, checks every chunk's checksum,
    // decompresses on `threads` workers (0 = hardware_concurrency) straight
    // into `dest`, which must match memory_regions() exactly (else
    // `corrupt:`). Zero ranges are cleared unless dest_is_zeroed.
    [[nodiscard]] Result<LoadStats> load_memory(std::span<const MemoryRegionView> dest, unsigned threads = 0,
                                                bool dest_is_zeroed = true) const;

    // Random access for lazy restore; thread-safe (pread).
    [[nodiscard]] std::size_t chunk_count() const { return chunks_.size(); }
    [[nodiscard]] ChunkRef chunk(std::size_t index) const;
    [[nodiscard]] std::optional<std::size_t> chunk_at(std::uint64_t guest_addr) const;
    // out.size() must be the chunk's length; checks the checksum.
    [[nodiscard]] Result<void> read_chunk(std::size_t index, std::span<std::uint8_t> out) const;

    // Raw mode only: the file and the page-aligned offset of region i, for mmap(MAP_PRIVATE).
    [[nodiscard]] int fd() const { return fd_.get(); }
    [[nodiscard]] Result<std::uint64_t> raw_region_offset(std::size_t region_index) const;
    // Raw mode: reads every chunk and checks its checksum (zero ranges must read as zeros).
    [[nodiscard]] Result<void> verify_raw_memory() const;

private:
    SnapshotReader() = default;
    // Verifies (and decompresses) stored bytes of chunk `c` into out.
    [[nodiscard]] Result<void> decode_chunk(const layout::ChunkEntry& c, std::span<const std::uint8_t> stored,
                                            std::span<std::uint8_t> out) const;

    UniqueFd fd_;
    SnapshotInfo info_;
    std::uint64_t file_bytes_ = 0;
    std::vector<Section> sections_;
    std::vector<layout::RegionEntry> regions_;
    std::vector<layout::ChunkEntry> chunks_;
    std::vector<GuestRange> working_set_;
};

}  // namespace sbx::snapshot

// Helpers shared by the snapshot format tests: a scratch directory, guest
// memory with known patterns, and raw file edits for corruption cases.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/mmap_region.hpp"
#include "snapshot/format/reader.hpp"
#include "snapshot/format/writer.hpp"

namespace sbx::snapshot::test {

// A fresh directory under $TMPDIR, removed with its files.
class ScratchDir {
public:
    ScratchDir();
    // The same under `base` (a tmpfs, say) instead of $TMPDIR.
    explicit ScratchDir(const std::string& base);
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    ~ScratchDir();
    [[nodiscard]] std::string path(const std::string& name) const { return dir_ + "/" + name; }
    [[nodiscard]] std::vector<std::string> entries() const;

private:
    std::string dir_;
};

// A tmpfs to put files on ($TMPDIR when it is one, else /dev/shm), where
// faulting a file's hole costs memory; $TMPDIR (or /tmp) when there is none.
std::string tmpfs_base();

enum class Fill { Random, Zero, HalfZero, Text };

// Guest RAM regions backed by anonymous mappings.
struct TestMemory {
    std::vector<MmapRegion> maps;
    std::vector<MemoryRegionView> views;
    void add(std::uint64_t guest_start, std::size_t size, Fill fill, std::uint32_t seed = 1);
    // Same layout, zero-filled (a restore destination).
    [[nodiscard]] TestMemory empty_like() const;
    [[nodiscard]] bool same_bytes(const TestMemory& other) const;
};

// Two sections and the memory, default info with the given mode and chunk size.
SnapshotContents make_contents(const TestMemory& memory, MemoryMode mode, std::uint32_t chunk_size);

std::vector<std::uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, std::span<const std::uint8_t> bytes);
std::uint64_t file_size(const std::string& path);
std::uint64_t allocated_bytes(const std::string& path);  // st_blocks * 512

// Pages of [addr, addr + pages * 4096) in this process that are present,
// and of those the private (anonymous) ones: /proc/self/pagemap
// (Documentation/admin-guide/mm/pagemap.rst) bits 63 and 61.
struct PageCounts {
    std::size_t present = 0;
    std::size_t private_copies = 0;
};
PageCounts count_pages(const std::uint8_t* addr, std::size_t pages);
std::uint64_t rss_bytes();  // this process's resident set (/proc/self/statm)

// The code word of a failed open (or "ok").
std::string open_code(const std::string& path);

}  // namespace sbx::snapshot::test

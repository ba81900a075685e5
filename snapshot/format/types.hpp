// Public types of the snapshot file format (docs/snapshot-format.md): what a
// snapshot holds, the options of a write, and the stable error codes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace sbx::snapshot {

// The one format version this code reads and writes; readers refuse others.
inline constexpr std::uint32_t kFormatVersion = 1;

#if defined(__x86_64__)
inline constexpr std::string_view kHostArch = "x86_64";
#elif defined(__aarch64__)
inline constexpr std::string_view kHostArch = "aarch64";
#else
inline constexpr std::string_view kHostArch = "unknown";
#endif

inline constexpr std::uint32_t kDefaultChunkSize = 256 * 1024;
inline constexpr std::uint32_t kMinChunkSize = 64 * 1024;
inline constexpr std::uint32_t kMaxChunkSize = 1024 * 1024;
inline constexpr std::uint64_t kPageSize = 4096;

// The first word of every error message, before ':' (what the control API reports).
namespace code {
inline constexpr std::string_view kBadMagic = "bad_magic";
inline constexpr std::string_view kUnsupportedVersion = "unsupported_version";
inline constexpr std::string_view kWrongArch = "wrong_arch";
inline constexpr std::string_view kTruncated = "truncated";
inline constexpr std::string_view kChecksumMismatch = "checksum_mismatch";
inline constexpr std::string_view kCorrupt = "corrupt";
inline constexpr std::string_view kIo = "io";
inline constexpr std::string_view kInvalid = "invalid";  // caller misuse (bad write input, wrong mode)
}  // namespace code

// An error of this library: `code` (one of the above) in Error::code, and
// also first in the message ("truncated: the file is ..."), as logs show it.
template <typename... Args>
[[nodiscard]] Error format_error(std::string_view code, fmt::format_string<Args...> fmt, Args&&... args) {
    return Error{fmt::format("{}: {}", code, fmt::format(fmt, std::forward<Args>(args)...)), 0, std::string(code)};
}

// The code of an error from this library (Error::code; "" when it has none).
std::string_view error_code(const Error& error);

enum class MemoryMode : std::uint32_t { Compressed = 0, Raw = 1 };

struct CpuFingerprint {
    std::string vendor;  // at most 15 bytes ("GenuineIntel")
    std::uint32_t family = 0, model = 0, stepping = 0;
    std::uint64_t cpuid_hash = 0;
};

struct SnapshotInfo {
    std::uint32_t format_version = kFormatVersion;
    std::string arch = std::string(kHostArch);  // at most 15 bytes
    CpuFingerprint cpu;
    MemoryMode mode = MemoryMode::Compressed;
    std::uint32_t chunk_size = kDefaultChunkSize;  // kMinChunkSize..kMaxChunkSize, a multiple of kPageSize
    std::uint64_t created_unix_ms = 0;
};

// An opaque named blob (encoded vCPU/VM/device state).
struct Section {
    std::string name;  // 1..64 bytes, unique in a snapshot
    std::vector<std::uint8_t> bytes;
};

struct GuestRange {
    std::uint64_t start = 0;
    std::uint64_t length = 0;
    friend bool operator==(const GuestRange&, const GuestRange&) = default;
};

// Where a MAP_PRIVATE mapping reads the pages its process has not written:
// `fd` (not owned) from `offset` on (a VM restored copy-on-write from a
// raw snapshot maps that snapshot's region so).
struct MappedFile {
    int fd = -1;
    std::uint64_t offset = 0;
};

// One region of guest RAM: its guest physical start and its host memory.
// With `file`, `host` is a MAP_PRIVATE mapping of it: the writer reads
// only the pages the process wrote through the mapping and takes every
// other page from the file (its holes as zero ranges, without a read), so
// a save faults in none of the mapping (writer.hpp).
struct MemoryRegionView {
    std::uint64_t guest_start = 0;
    std::span<std::uint8_t> host;
    std::optional<MappedFile> file = std::nullopt;
};

struct SnapshotContents {
    SnapshotInfo info;
    std::vector<Section> sections;
    // Ascending, non-overlapping; start and size page-aligned.
    std::vector<MemoryRegionView> memory;
    // A hint for lazy restore (pages to prefetch first); each range inside a region. May be empty.
    std::vector<GuestRange> working_set;
};

struct WriteOptions {
    int zstd_level = 1;
    unsigned threads = 0;  // 0 = hardware_concurrency
};

struct WriteStats {
    std::uint64_t memory_bytes = 0, zero_bytes = 0, file_bytes = 0;
    double seconds = 0;
};

struct LoadStats {
    std::uint64_t bytes_read = 0, memory_bytes = 0;
    double seconds = 0;
};

// One entry of the memory index: a data chunk (at most chunk_size bytes) or
// a run of all-zero memory (at most kMaxZeroRun bytes).
struct ChunkRef {
    std::uint64_t guest_start = 0;
    std::uint32_t length = 0;
    bool zero = false;
};

inline constexpr std::uint32_t kMaxZeroRun = 1U << 30;

}  // namespace sbx::snapshot

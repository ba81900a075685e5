#include "snapshot/hole_overlay.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sbx::snapshot {
namespace {

constexpr std::uint64_t kPage = 4096;

// lseek(2) SEEK_HOLE / SEEK_DATA from pos; ENXIO (nothing more) is `none`.
Result<std::uint64_t> seek(int fd, std::uint64_t pos, int whence, std::uint64_t none) {
    const off_t at = ::lseek(fd, static_cast<off_t>(pos), whence);
    if (at >= 0) {
        return static_cast<std::uint64_t>(at);
    }
    if (errno == ENXIO) {
        return none;
    }
    return sys_error("lseek {} in the memory file", whence == SEEK_HOLE ? "SEEK_HOLE" : "SEEK_DATA");
}

}  // namespace

Result<std::size_t> overlay_holes(std::uint8_t* base, std::size_t size, int fd, std::uint64_t offset,
                                  HoleOverlayLimits limits) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return sys_error("stat the memory file");
    }
    const std::uint64_t end = std::min<std::uint64_t>(offset + size, static_cast<std::uint64_t>(st.st_size));
    std::size_t ranges = 0;
    for (std::uint64_t pos = offset; pos < end && ranges < limits.max_ranges;) {
        auto hole = seek(fd, pos, SEEK_HOLE, end);
        if (!hole) {
            return hole.error();
        }
        if (*hole >= end) {
            break;
        }
        auto data = seek(fd, *hole, SEEK_DATA, end);
        if (!data) {
            return data.error();
        }
        const std::uint64_t hole_end = std::min(*data, end);
        const std::uint64_t first = (*hole + kPage - 1) / kPage * kPage;
        const std::uint64_t last = hole_end / kPage * kPage;
        if (last > first && last - first >= limits.min_bytes) {
            void* at = base + (first - offset);
            const std::size_t length = last - first;
            if (::mmap(at, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                       -1, 0) == MAP_FAILED) {
                return sys_error("mapping anonymous memory over a hole of {} bytes", length);
            }
            // EINVAL: a kernel without transparent huge pages; nothing lost.
            (void)::madvise(at, length, MADV_HUGEPAGE);
            ++ranges;
        }
        pos = std::max(hole_end, *hole + 1);
    }
    return ranges;
}

}  // namespace sbx::snapshot

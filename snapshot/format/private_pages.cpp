#include "snapshot/format/private_pages.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "snapshot/format/types.hpp"

namespace sbx::snapshot {

namespace {

constexpr std::uint64_t kPresent = 1ULL << 63;
constexpr std::uint64_t kSwapped = 1ULL << 62;
constexpr std::uint64_t kFilePage = 1ULL << 61;

// The range must lie inside the file: a MAP_PRIVATE mapping past the
// file's end raises SIGBUS (mmap(2)), so such memory has no bytes to save.
Result<void> check_inside(int fd, std::uint64_t offset, std::uint64_t length) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return sys_error("io: fstat of the file guest memory maps").with_code("io");
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (offset > size || length > size - offset) {
        return format_error("io", "guest memory maps bytes {}..{} of a file of {} bytes (it shrank)", offset,
                            offset + length, size);
    }
    return ok();
}

// The next data at or after `pos` (lseek(2) SEEK_DATA), or `end` when the
// rest of the range is a hole.
Result<std::uint64_t> next_data(int fd, std::uint64_t pos, std::uint64_t end) {
    off_t data = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
    if (data < 0) {
        if (errno == ENXIO) {
            return end;  // only a hole up to the end of the file
        }
        return sys_error("io: lseek SEEK_DATA in the file guest memory maps").with_code("io");
    }
    return std::min(static_cast<std::uint64_t>(data), end);
}

}  // namespace

Result<PageMap> PageMap::open() {
    auto fd = UniqueFd::open("/proc/self/pagemap", O_RDONLY);
    if (!fd) {
        return fd.error().context("io").with_code("io");
    }
    return PageMap(std::move(*fd));
}

Result<void> PageMap::private_copies(const void* addr, std::size_t pages, std::vector<bool>& written) const {
    std::vector<std::uint64_t> entries(pages);
    const auto first = reinterpret_cast<std::uintptr_t>(addr) / kPageSize;
    std::size_t done = 0;
    while (done < pages * sizeof(std::uint64_t)) {
        ssize_t n = ::pread(fd_.get(), reinterpret_cast<std::uint8_t*>(entries.data()) + done,
                            pages * sizeof(std::uint64_t) - done,
                            static_cast<off_t>(first * sizeof(std::uint64_t) + done));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return sys_error("io: reading /proc/self/pagemap").with_code("io");
        }
        done += static_cast<std::size_t>(n);
    }
    written.assign(pages, false);
    for (std::size_t i = 0; i < pages; ++i) {
        const std::uint64_t e = entries[i];
        written[i] = (e & kSwapped) != 0 || ((e & kPresent) != 0 && (e & kFilePage) == 0);
    }
    return ok();
}

Result<bool> file_range_is_hole(int fd, std::uint64_t offset, std::uint64_t length) {
    if (auto inside = check_inside(fd, offset, length); !inside) {
        return inside.error();
    }
    auto data = next_data(fd, offset, offset + length);
    if (!data) {
        return data.error();
    }
    return *data == offset + length;
}

Result<void> read_file_range(int fd, std::uint64_t offset, std::span<std::uint8_t> out) {
    if (auto inside = check_inside(fd, offset, out.size()); !inside) {
        return inside;
    }
    const std::uint64_t end = offset + out.size();
    std::uint64_t pos = offset;
    while (pos < end) {
        auto data = next_data(fd, pos, end);
        if (!data) {
            return data.error();
        }
        std::memset(out.data() + (pos - offset), 0, *data - pos);
        pos = *data;
        if (pos == end) {
            break;
        }
        off_t hole = ::lseek(fd, static_cast<off_t>(pos), SEEK_HOLE);
        if (hole < 0) {
            return sys_error("io: lseek SEEK_HOLE in the file guest memory maps").with_code("io");
        }
        const std::uint64_t data_end = std::min(static_cast<std::uint64_t>(hole), end);
        while (pos < data_end) {
            ssize_t n = ::pread(fd, out.data() + (pos - offset), data_end - pos, static_cast<off_t>(pos));
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                return sys_error("io: reading the file guest memory maps at {}", pos).with_code("io");
            }
            if (n == 0) {
                return format_error("io", "the file guest memory maps ends at {}, inside the memory", pos);
            }
            pos += static_cast<std::uint64_t>(n);
        }
    }
    return ok();
}

}  // namespace sbx::snapshot

#include "base/mmap_region.hpp"

#include <fcntl.h>
#include <sys/mman.h>

#include "base/unique_fd.hpp"

namespace sbx {

Result<MmapRegion> MmapRegion::anonymous(std::size_t size) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return sys_error("cannot map {} bytes of memory", size);
    }
    return MmapRegion(p, size);
}

Result<MmapRegion> MmapRegion::guest_ram(std::size_t size) {
    constexpr std::size_t kHugePage = 2 << 20;
    // Over-map by one huge page and trim: mmap aligns only to 4 KiB (before
    // Linux 6.7, which aligns large anonymous mappings itself).
    const std::size_t padded = size + kHugePage;
    void* p = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return sys_error("cannot map {} bytes of memory", size);
    }
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
    if (aligned > start) {
        ::munmap(p, aligned - start);
    }
    if (const std::size_t tail = start + padded - (aligned + size); tail > 0) {
        ::munmap(reinterpret_cast<void*>(aligned + size), tail);
    }
    MmapRegion region(reinterpret_cast<void*>(aligned), size);
    // EINVAL: a kernel without CONFIG_TRANSPARENT_HUGEPAGE; nothing lost.
    (void)::madvise(region.data(), size, MADV_HUGEPAGE);
    return region;
}

Result<MmapRegion> MmapRegion::shared(int fd, std::size_t size, off_t offset) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);
    if (p == MAP_FAILED) {
        return sys_error("cannot map {} bytes of fd {}", size, fd);
    }
    return MmapRegion(p, size);
}

Result<MmapRegion> MmapRegion::private_copy(int fd, std::size_t size, off_t offset) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, offset);
    if (p == MAP_FAILED) {
        return sys_error("cannot map {} bytes of fd {} at offset {} copy-on-write", size, fd, offset);
    }
    return MmapRegion(p, size);
}

Result<MmapRegion> MmapRegion::map_file(const std::string& path, std::size_t max_bytes) {
    auto file = open_regular_file(path, max_bytes);
    if (!file) {
        return file.error();
    }
    return map_file(*file, path);
}

Result<MmapRegion> MmapRegion::map_file(const RegularFile& file, const std::string& path) {
    if (file.size == 0) {
        return make_error("{} is empty", path);
    }
    void* p = ::mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, file.fd.get(), 0);
    if (p == MAP_FAILED) {
        return sys_error("cannot map {}", path);
    }
    return MmapRegion(p, file.size);
}

void MmapRegion::unmap() {
    if (addr_ != nullptr) {
        ::munmap(addr_, size_);
        addr_ = nullptr;
        size_ = 0;
    }
}

}  // namespace sbx

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
    if (file->size == 0) {
        return make_error("{} is empty", path);
    }
    void* p = ::mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, file->fd.get(), 0);
    if (p == MAP_FAILED) {
        return sys_error("cannot map {}", path);
    }
    return MmapRegion(p, file->size);
}

void MmapRegion::unmap() {
    if (addr_ != nullptr) {
        ::munmap(addr_, size_);
        addr_ = nullptr;
        size_ = 0;
    }
}

}  // namespace sbx

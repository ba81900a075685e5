#include "base/mmap_region.hpp"

#include <sys/mman.h>

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

void MmapRegion::unmap() {
    if (addr_ != nullptr) {
        ::munmap(addr_, size_);
        addr_ = nullptr;
        size_ = 0;
    }
}

}  // namespace sbx

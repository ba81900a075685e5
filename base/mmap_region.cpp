#include "base/mmap_region.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

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

Result<MmapRegion> MmapRegion::map_file(const std::string& path, std::size_t max_bytes) {
    auto fd = UniqueFd::open(path, O_RDONLY);
    if (!fd) {
        return fd.error();
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) {
        return sys_error("cannot stat {}", path);
    }
    if (!S_ISREG(st.st_mode)) {
        return make_error("{} is not a regular file", path);
    }
    if (st.st_size == 0) {
        return make_error("{} is empty", path);
    }
    auto size = static_cast<std::size_t>(st.st_size);
    if (size > max_bytes) {
        return make_error("{} is {} bytes, over the limit of {}", path, size, max_bytes);
    }
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd->get(), 0);
    if (p == MAP_FAILED) {
        return sys_error("cannot map {}", path);
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

// RAII owner of an mmap(2) mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "base/result.hpp"

namespace sbx {

struct RegularFile;

class MmapRegion {
public:
    MmapRegion() = default;
    MmapRegion(const MmapRegion&) = delete;
    MmapRegion& operator=(const MmapRegion&) = delete;
    MmapRegion(MmapRegion&& other) noexcept
        : addr_(std::exchange(other.addr_, nullptr)), size_(std::exchange(other.size_, 0)) {}
    MmapRegion& operator=(MmapRegion&& other) noexcept {
        if (this != &other) {
            unmap();
            addr_ = std::exchange(other.addr_, nullptr);
            size_ = std::exchange(other.size_, 0);
        }
        return *this;
    }
    ~MmapRegion() { unmap(); }

    // Private anonymous memory, not reserved against swap.
    static Result<MmapRegion> anonymous(std::size_t size);
    // Guest RAM: anonymous memory starting on a 2 MiB boundary and marked
    // MADV_HUGEPAGE, so the kernel can back it with transparent huge pages
    // and KVM map it with 2 MiB nested-page entries (fewer EPT/NPT faults
    // and TLB misses; QEMU and Cloud Hypervisor do the same). On a kernel
    // without THP it is plain anonymous memory.
    static Result<MmapRegion> guest_ram(std::size_t size);
    // A shared mapping of fd at offset (e.g. the vCPU's kvm_run page).
    static Result<MmapRegion> shared(int fd, std::size_t size, off_t offset = 0);
    // A writable copy-on-write (MAP_PRIVATE) mapping of fd at offset: reads
    // come from the file (holes read as zeros), writes stay in this process.
    static Result<MmapRegion> private_copy(int fd, std::size_t size, off_t offset);
    // A read-only private mapping of a whole regular file (kernel, initrd):
    // only the pages a caller touches are read. Refuses files over
    // max_bytes and empty ones. The file must not shrink while mapped.
    static Result<MmapRegion> map_file(const std::string& path, std::size_t max_bytes);
    // The same for a file already open (open_regular_file), which the
    // caller keeps, e.g. to map its pages elsewhere too; `path` for errors.
    static Result<MmapRegion> map_file(const RegularFile& file, const std::string& path);

    [[nodiscard]] std::uint8_t* data() const { return static_cast<std::uint8_t*>(addr_); }
    [[nodiscard]] std::size_t size() const { return size_; }
    [[nodiscard]] std::span<std::uint8_t> bytes() const { return {data(), size_}; }

private:
    MmapRegion(void* addr, std::size_t size) : addr_(addr), size_(size) {}
    void unmap();

    void* addr_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace sbx

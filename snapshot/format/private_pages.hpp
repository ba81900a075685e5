// Saving memory that is a MAP_PRIVATE mapping of a file (a VM restored
// copy-on-write from a raw snapshot) without touching the pages the
// process never wrote: which pages are private copies (pagemap), and
// reading the others from the file with its holes as zeros (SEEK_HOLE).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/result.hpp"
#include "base/unique_fd.hpp"

namespace sbx::snapshot {

// /proc/self/pagemap (Documentation/admin-guide/mm/pagemap.rst): one u64
// per virtual page; bit 63 present, 62 swapped, 61 "file page or shared
// anonymous". In a MAP_PRIVATE file mapping a page the process has written
// is an anonymous copy: present without bit 61, or swapped out (file pages
// leave no swap entry behind). Every other page, mapped or not, still
// reads the file's bytes. These bits need no privilege (only the PFN
// field is hidden without CAP_SYS_ADMIN), and reading them faults nothing.
class PageMap {
public:
    static Result<PageMap> open();

    // written[i] = whether page i of [addr, addr + pages * 4096) is a
    // private copy; `addr` is page-aligned. Thread-safe (pread).
    [[nodiscard]] Result<void> private_copies(const void* addr, std::size_t pages,
                                              std::vector<bool>& written) const;

private:
    explicit PageMap(UniqueFd fd) : fd_(std::move(fd)) {}
    UniqueFd fd_;
};

// Whether [offset, offset + length) of fd is one hole (lseek SEEK_DATA
// finds no data in it). A file system without SEEK_DATA reports all data.
[[nodiscard]] Result<bool> file_range_is_hole(int fd, std::uint64_t offset, std::uint64_t length);

// Reads [offset, offset + out.size()) of fd into out, holes as zeros
// without reading them (on tmpfs and disk file systems alike, a hole
// stays a hole). A file that ends inside the range is an `io:` error.
[[nodiscard]] Result<void> read_file_range(int fd, std::uint64_t offset, std::span<std::uint8_t> out);

}  // namespace sbx::snapshot

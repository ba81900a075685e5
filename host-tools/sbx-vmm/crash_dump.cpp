#include "host-tools/sbx-vmm/crash_dump.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>

#include "base/unique_fd.hpp"

namespace sbx {

namespace {

constexpr std::uint64_t kPage = 4096;

bool zero_page(const std::uint8_t* p) {
    return p[0] == 0 && std::equal(p + 1, p + kPage, p);
}

// The pages, then the size, into `fd`; returns the bytes written.
Result<std::uint64_t> write_pages(const GuestMemory& memory, int fd, const std::string& name) {
    std::uint64_t written = 0;
    for (const auto& region : memory.regions()) {
        const auto* base = static_cast<const std::uint8_t*>(region.mapping.data());
        for (std::uint64_t off = 0; off + kPage <= region.size(); off += kPage) {
            if (zero_page(base + off)) {
                continue;
            }
            const auto at = static_cast<off_t>(region.start.value + off);
            if (::pwrite(fd, base + off, kPage, at) != static_cast<ssize_t>(kPage)) {
                return sys_error("writing the crash dump {}", name);
            }
            written += kPage;
        }
    }
    if (::ftruncate(fd, static_cast<off_t>(memory.end())) != 0) {
        return sys_error("sizing the crash dump {}", name);
    }
    return written;
}

}  // namespace

Result<std::uint64_t> write_crash_dump(const GuestMemory& memory, int dir_fd, const std::string& name) {
    const std::string partial = name + kCrashDumpPartialSuffix;
    auto fd = UniqueFd(::openat(dir_fd, partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) {
        return sys_error("creating the crash dump {}", partial);
    }
    // Named even when cut short (a full disk): whoever waits for the name
    // stops waiting, and a walk past its end says it is short.
    auto written = write_pages(memory, fd.get(), name);
    if (::renameat(dir_fd, partial.c_str(), dir_fd, name.c_str()) != 0) {
        return sys_error("naming the crash dump {}", name);
    }
    return written;
}

}  // namespace sbx

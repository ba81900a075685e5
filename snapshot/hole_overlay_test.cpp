// overlay_holes on a real tmpfs file (/dev/shm), where a hole touched
// through a MAP_PRIVATE mapping would otherwise become a page of the file.
#include "snapshot/hole_overlay.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/unique_fd.hpp"

using namespace sbx;
using namespace sbx::snapshot;

namespace {

constexpr std::size_t kMiB = 1 << 20;
constexpr long kTmpfsMagic = 0x01021994;

std::uint64_t blocks_of(int fd) {
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    return static_cast<std::uint64_t>(st.st_blocks);
}

void put(int fd, std::uint64_t at, char c, std::size_t n = 4096) {
    std::string bytes(n, c);
    REQUIRE(::pwrite(fd, bytes.data(), n, static_cast<off_t>(at)) == static_cast<ssize_t>(n));
}

}  // namespace

TEST_CASE("holes of a tmpfs memory file are overlaid: touching them fills nothing, data reads through") {
    struct statfs fs {};
    if (::statfs("/dev/shm", &fs) != 0 || fs.f_type != kTmpfsMagic) {
        MESSAGE("no tmpfs at /dev/shm: nothing to show here");
        return;
    }
    char name[] = "/dev/shm/sbx-hole-overlay-XXXXXX";
    UniqueFd fd(::mkstemp(name));
    REQUIRE(fd);
    ::unlink(name);
    // 64 MiB: data at 0, at 8 MiB, and at 12 MiB and 12 MiB + 8 KiB (a 4 KiB
    // hole between them, under min_bytes); holes elsewhere. The mapping
    // covers 4 MiB more than the file: that stays the file's (a SIGBUS).
    REQUIRE(::ftruncate(fd.get(), 64 * kMiB) == 0);
    put(fd.get(), 0, 'a');
    put(fd.get(), 8 * kMiB, 'b');
    put(fd.get(), 12 * kMiB, 'c');
    put(fd.get(), 12 * kMiB + 8192, 'd');
    const std::uint64_t blocks = blocks_of(fd.get());
    const std::size_t size = 68 * kMiB;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd.get(), 0);
    REQUIRE(p != MAP_FAILED);
    auto* base = static_cast<std::uint8_t*>(p);

    auto overlaid = overlay_holes(base, size, fd.get(), 0);
    REQUIRE(overlaid);
    CHECK(*overlaid == 3);  // [4 KiB, 8 MiB), [8 MiB + 4 KiB, 12 MiB), [12 MiB + 12 KiB, 64 MiB)

    // Data reads through; every overlaid page reads zero and takes writes.
    CHECK(base[0] == 'a');
    CHECK(base[8 * kMiB + 4095] == 'b');
    CHECK(base[12 * kMiB] == 'c');
    CHECK(base[12 * kMiB + 8192] == 'd');
    for (std::size_t at = 4096; at < 64 * kMiB; at += 4096) {
        if (at == 8 * kMiB || (at >= 12 * kMiB && at < 12 * kMiB + 12288)) {
            continue;
        }
        REQUIRE(base[at] == 0);
        base[at] = 1;
    }
    CHECK(blocks_of(fd.get()) == blocks);  // tmpfs allocated nothing for them
    // The 4 KiB hole stays the file's: touching it fills it, as before.
    base[12 * kMiB + 4096] = 1;
    CHECK(blocks_of(fd.get()) > blocks);
    // Copy-on-write as before: the file keeps its bytes.
    base[0] = 'z';
    char first = 0;
    REQUIRE(::pread(fd.get(), &first, 1, 0) == 1);
    CHECK(first == 'a');
    ::munmap(p, size);
}

TEST_CASE("a file without holes, a region at an offset, and the range limit") {
    char name[] = "/tmp/sbx-hole-overlay-XXXXXX";
    UniqueFd fd(::mkstemp(name));
    REQUIRE(fd);
    ::unlink(name);
    REQUIRE(::ftruncate(fd.get(), 16 * kMiB) == 0);
    for (std::uint64_t at = 0; at < 16 * kMiB; at += 2 * kMiB) {
        put(fd.get(), at, 'x');  // holes of 2 MiB - 4 KiB in between (on a file system that keeps them)
    }
    const std::size_t size = 8 * kMiB;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd.get(), 8 * kMiB);
    REQUIRE(p != MAP_FAILED);
    auto* base = static_cast<std::uint8_t*>(p);
    auto overlaid = overlay_holes(base, size, fd.get(), 8 * kMiB, HoleOverlayLimits{64 * 1024, 2});
    REQUIRE(overlaid);
    CHECK(*overlaid <= 2);
    for (std::size_t at = 0; at < size; at += 2 * kMiB) {
        CHECK(base[at] == 'x');
        CHECK(base[at + 4096] == 0);
    }
    ::munmap(p, size);

    // All data: nothing to overlay.
    char full_name[] = "/tmp/sbx-hole-overlay-full-XXXXXX";
    UniqueFd full(::mkstemp(full_name));
    REQUIRE(full);
    ::unlink(full_name);
    put(full.get(), 0, 'y', kMiB);
    void* q = ::mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE, full.get(), 0);
    REQUIRE(q != MAP_FAILED);
    auto none = overlay_holes(static_cast<std::uint8_t*>(q), kMiB, full.get(), 0);
    REQUIRE(none);
    CHECK(*none == 0);
    ::munmap(q, kMiB);
}

// Saving the memory of a VM restored copy-on-write from a raw snapshot: the
// memory is a MAP_PRIVATE mapping of the template's file, as a private
// restore maps it (snapshot/vm_snapshot.cpp). The save must read only the
// pages the VM wrote: it must not fault in the rest of the mapping (on
// tmpfs a read fault on a hole fills the hole, so the template's file grew
// to its full length in memory), and the new file holds the memory's data,
// not the mapping's length. Exits 77 without /proc/self/pagemap.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include "snapshot/format/test_util.hpp"

using namespace sbx;
using namespace sbx::snapshot;
using namespace sbx::snapshot::test;

namespace {

constexpr std::size_t kRegion = 256 << 20;
constexpr std::size_t kData = 8 << 20;  // the template's non-zero memory, at the start
constexpr std::size_t kPage = 4096;
constexpr std::size_t kPages = kRegion / kPage;

// A template (8 MiB of data, the rest zero, so mostly holes) and a VM's
// memory restored from it copy-on-write, which has written a few pages.
struct RestoredMemory {
    ScratchDir dir{tmpfs_base()};
    std::string template_path = dir.path("template.snap");
    std::optional<SnapshotReader> reader;
    MmapRegion mapping;
    std::uint64_t offset = 0;
    // Pages the "guest" wrote: where the template had zeros, and its data.
    std::vector<std::size_t> written_pages = {kData / kPage + 5, (100 << 20) / kPage, (200 << 20) / kPage + 1,
                                              3};

    RestoredMemory() {
        {
            TestMemory memory;
            memory.add(0, kRegion, Fill::Zero);
            for (std::size_t i = 0; i < kData; ++i) {
                memory.views[0].host[i] = static_cast<std::uint8_t>("template memory "[i % 16]);
            }
            auto written =
                write_snapshot(template_path, make_contents(memory, MemoryMode::Raw, kDefaultChunkSize));
            REQUIRE_MESSAGE(written, (written ? "" : written.error().to_string()));
        }
        auto opened = SnapshotReader::open(template_path);
        REQUIRE(opened);
        reader.emplace(std::move(*opened));
        auto raw_offset = reader->raw_region_offset(0);
        REQUIRE(raw_offset);
        offset = *raw_offset;
        auto mapped = MmapRegion::private_copy(reader->fd(), kRegion, static_cast<off_t>(offset));
        REQUIRE(mapped);
        mapping = std::move(*mapped);
        for (auto page : written_pages) {
            std::memset(mapping.data() + page * kPage, 0x5a, 100);
        }
        std::memset(mapping.data() + (150 << 20), 0, kPage);      // a private copy that is all zero
        volatile std::uint8_t read = mapping.data()[10 * kPage];  // a read: a file page, not a copy
        (void)read;
    }

    [[nodiscard]] SnapshotContents contents(MemoryMode mode, bool with_file) const {
        SnapshotContents c;
        c.info.mode = mode;
        c.info.cpu = {"GenuineIntel", 6, 85, 7, 0x1234abcdULL};
        c.sections.push_back({"machine", std::vector<std::uint8_t>(300, 0xab)});
        c.memory.push_back({0, mapping.bytes(), std::nullopt});
        if (with_file) {
            c.memory.back().file = MappedFile{reader->fd(), offset};
        }
        return c;
    }

    // The saved file loads to exactly the memory the VM has.
    void check_saved(const std::string& path) const {
        auto saved = SnapshotReader::open(path);
        REQUIRE_MESSAGE(saved, (saved ? "" : saved.error().to_string()));
        if (saved->info().mode == MemoryMode::Raw) {
            CHECK(saved->verify_raw_memory());
        }
        TestMemory loaded;
        loaded.add(0, kRegion, Fill::Zero);
        REQUIRE(saved->load_memory(loaded.views, 2, true));
        CHECK(std::memcmp(loaded.views[0].host.data(), mapping.data(), kRegion) == 0);
    }
};

struct Measured {
    Result<WriteStats> stats;
    PageCounts before, after;
    std::uint64_t template_before = 0, template_after = 0, rss_before = 0, rss_after = 0;
    double seconds = 0;
};

Measured save(const RestoredMemory& memory, const std::string& path, MemoryMode mode, bool with_file) {
    Measured m{format_error("invalid", "not run"), {}, {}};
    m.before = count_pages(memory.mapping.data(), kPages);
    m.template_before = allocated_bytes(memory.template_path);
    m.rss_before = rss_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    m.stats = write_snapshot(path, memory.contents(mode, with_file), {.threads = 2});
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.after = count_pages(memory.mapping.data(), kPages);
    m.template_after = allocated_bytes(memory.template_path);
    m.rss_after = rss_bytes();
    std::printf(
        "%s save, %s: %zu of %zu pages present before, %zu after (%zu private copies); template file "
        "%llu KiB allocated before, %llu KiB after; RSS %+lld KiB; new file %llu KiB allocated; %.1f ms\n",
        mode == MemoryMode::Raw ? "raw" : "compressed",
        with_file ? "pages not written read from the file" : "every page read through the mapping",
        m.before.present, kPages, m.after.present, m.after.private_copies,
        static_cast<unsigned long long>(m.template_before >> 10),
        static_cast<unsigned long long>(m.template_after >> 10),
        (static_cast<long long>(m.rss_after) - static_cast<long long>(m.rss_before)) / 1024,
        static_cast<unsigned long long>(m.stats ? allocated_bytes(path) >> 10 : 0), m.seconds * 1000);
    return m;
}

}  // namespace

TEST_CASE("a save reads none of a private mapping's pages the process did not write") {
    for (auto mode : {MemoryMode::Raw, MemoryMode::Compressed}) {
        CAPTURE(static_cast<int>(mode));
        RestoredMemory memory;
        const auto path = memory.dir.path("sandbox.snap");
        auto m = save(memory, path, mode, true);
        REQUIRE_MESSAGE(m.stats, (m.stats ? "" : m.stats.error().to_string()));
        // (b) nothing faulted in: the same pages present, the template's holes still holes
        CHECK(m.after.present == m.before.present);
        CHECK(m.after.private_copies == memory.written_pages.size() + 1);
        CHECK(m.template_after == m.template_before);
        CHECK(m.rss_after <
              m.rss_before + (32 << 20));  // buffers (more under ASan); the fault-in was the mapping's size
        // (a) the new file holds the data and the chunks with written pages; the rest are zero ranges
        const std::uint64_t written_chunks = 3 * kDefaultChunkSize;  // one page of data was written too
        CHECK(m.stats->zero_bytes == kRegion - kData - written_chunks);
        if (mode == MemoryMode::Raw) {
            CHECK(allocated_bytes(path) <= kData + written_chunks + (64 << 10));
            CHECK(file_size(path) > kRegion);
        } else {
            CHECK(file_size(path) < (1 << 20));  // text compresses well
        }
        memory.check_saved(path);
    }
}

TEST_CASE("without the mapped file the writer faults in every page (what a restored VM's save did)") {
    RestoredMemory memory;
    const auto path = memory.dir.path("sandbox.snap");
    auto m = save(memory, path, MemoryMode::Raw, false);
    REQUIRE_MESSAGE(m.stats, (m.stats ? "" : m.stats.error().to_string()));
    CHECK(m.after.present == kPages);
    CHECK(m.stats->zero_bytes == kRegion - kData - 3 * kDefaultChunkSize);
    memory.check_saved(path);
}

TEST_CASE("a template file that shrank under the mapping is an io error, not a crash") {
    RestoredMemory memory;
    REQUIRE(::truncate(memory.template_path.c_str(), static_cast<off_t>(memory.offset + kRegion / 2)) == 0);
    const auto path = memory.dir.path("sandbox.snap");
    for (auto mode : {MemoryMode::Raw, MemoryMode::Compressed}) {
        auto r = write_snapshot(path, memory.contents(mode, true), {.threads = 2});
        REQUIRE_FALSE(r);
        CHECK(error_code(r.error()) == "io");
        CHECK(memory.dir.entries() == std::vector<std::string>{"template.snap"});
    }
}

TEST_CASE("a mapped file the writer cannot read is refused before anything is written") {
    RestoredMemory memory;
    auto c = memory.contents(MemoryMode::Raw, true);
    c.memory[0].file->fd = -1;
    auto r = write_snapshot(memory.dir.path("sandbox.snap"), c);
    REQUIRE_FALSE(r);
    CHECK(error_code(r.error()) == "invalid");
    CHECK(memory.dir.entries() == std::vector<std::string>{"template.snap"});
}

int main(int argc, char** argv) {
    int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    std::uint64_t entry = 0;
    if (fd < 0 || ::pread(fd, &entry, sizeof entry, 0) != static_cast<ssize_t>(sizeof entry)) {
        std::printf("SKIP: /proc/self/pagemap cannot be read here\n");
        return 77;
    }
    ::close(fd);
    doctest::Context context(argc, argv);
    return context.run();
}

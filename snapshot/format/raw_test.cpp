#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "snapshot/format/test_util.hpp"

using namespace sbx;
using namespace sbx::snapshot;
using namespace sbx::snapshot::test;

TEST_CASE("raw regions map MAP_PRIVATE with the right bytes, holes for zeros, and copy-on-write") {
    ScratchDir dir;
    TestMemory memory;
    memory.add(0, 4 << 20, Fill::HalfZero, 11);
    memory.add(1ULL << 32, 1 << 20, Fill::Text, 12);  // far above, like RAM above the PCI hole
    memory.add((1ULL << 32) + (2 << 20), 8 << 20, Fill::Zero);
    const auto path = dir.path("raw.snap");
    auto written = write_snapshot(path, make_contents(memory, MemoryMode::Raw, kDefaultChunkSize));
    REQUIRE_MESSAGE(written, written.error().to_string());
    // Zero chunks are holes: far less is allocated than the file's length.
    CHECK(file_size(path) > (13 << 20));
    CHECK(allocated_bytes(path) < file_size(path) - (8 << 20));
    const auto before = read_bytes(path);

    auto reader = SnapshotReader::open(path);
    REQUIRE(reader);
    REQUIRE(reader->verify_raw_memory());
    for (std::size_t i = 0; i < memory.views.size(); ++i) {
        auto offset = reader->raw_region_offset(i);
        REQUIRE(offset);
        CHECK(*offset % kPageSize == 0);
        const auto& view = memory.views[i];
        void* p = ::mmap(nullptr, view.host.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE, reader->fd(),
                         static_cast<off_t>(*offset));
        REQUIRE(p != MAP_FAILED);
        auto* bytes = static_cast<std::uint8_t*>(p);
        CHECK(std::memcmp(bytes, view.host.data(), view.host.size()) == 0);
        std::memset(bytes, 0xff, view.host.size());  // copy-on-write: the file must not change
        ::munmap(p, view.host.size());
    }
    CHECK(read_bytes(path) == before);
    CHECK(reader->verify_raw_memory());
    CHECK_FALSE(reader->raw_region_offset(3));
}

TEST_CASE("raw_region_offset and verify_raw_memory refuse compressed snapshots") {
    ScratchDir dir;
    TestMemory memory;
    memory.add(0, 64 * 1024, Fill::Text);
    REQUIRE(write_snapshot(dir.path("c"), make_contents(memory, MemoryMode::Compressed, kMinChunkSize)));
    auto reader = SnapshotReader::open(dir.path("c"));
    REQUIRE(reader);
    CHECK(error_code(reader->raw_region_offset(0).error()) == "invalid");
    CHECK(error_code(reader->verify_raw_memory().error()) == "invalid");
}

TEST_CASE("a failed write leaves the previous snapshot and no temporary file") {
    ScratchDir dir;
    TestMemory small;
    small.add(0, 64 * 1024, Fill::Text);
    const auto path = dir.path("vm.snap");
    REQUIRE(write_snapshot(path, make_contents(small, MemoryMode::Compressed, kMinChunkSize)));
    const auto old_bytes = read_bytes(path);

    TestMemory big;
    big.add(0, 8 << 20, Fill::Random, 21);
    for (auto mode : {MemoryMode::Compressed, MemoryMode::Raw}) {
        // A file size limit makes the write fail with EFBIG part way through.
        pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            std::signal(SIGXFSZ, SIG_IGN);
            rlimit limit{1 << 20, 1 << 20};
            ::setrlimit(RLIMIT_FSIZE, &limit);
            auto r = write_snapshot(path, make_contents(big, mode, kDefaultChunkSize), {.threads = 2});
            ::_exit(r ? 1 : (error_code(r.error()) == "io" ? 0 : 2));
        }
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        REQUIRE(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
        CHECK(dir.entries() == std::vector<std::string>{"vm.snap"});
        CHECK(read_bytes(path) == old_bytes);
        CHECK(open_code(path) == "ok");
    }
}

TEST_CASE("a write into a missing directory fails with io and creates nothing") {
    ScratchDir dir;
    SnapshotContents empty;
    auto r = write_snapshot(dir.path("no/such/dir/vm.snap"), empty);
    REQUIRE_FALSE(r);
    CHECK(error_code(r.error()) == "io");
    CHECK(dir.entries().empty());
}

#include <doctest/doctest.h>

#include <cstring>

#include "snapshot/format/test_util.hpp"

using namespace sbx;
using namespace sbx::snapshot;
using namespace sbx::snapshot::test;

namespace {

TestMemory mixed_memory() {
    TestMemory m;
    m.add(0, 2 << 20, Fill::HalfZero, 1);
    m.add(3 << 20, 1 << 20, Fill::Random, 2);          // after a 1 MiB gap
    m.add(8 << 20, (1 << 20) + 12288, Fill::Text, 3);  // ends in a short chunk
    m.add(16 << 20, 1 << 20, Fill::Zero);
    return m;
}

void check_round_trip(MemoryMode mode, std::uint32_t chunk_size, unsigned threads) {
    ScratchDir dir;
    auto memory = mixed_memory();
    auto contents = make_contents(memory, mode, chunk_size);
    contents.working_set = {{0, 8192}, {(3 << 20) + 4096, 4096}};
    const auto path = dir.path("vm.snap");
    auto written = write_snapshot(path, contents, {.zstd_level = 3, .threads = threads});
    REQUIRE_MESSAGE(written, written.error().to_string());
    CHECK(written->file_bytes == file_size(path));
    CHECK(written->memory_bytes == (5 << 20) + 12288);
    CHECK(written->zero_bytes >= (1 << 20));

    auto reader = SnapshotReader::open(path);
    REQUIRE_MESSAGE(reader, reader.error().to_string());
    CHECK(reader->info().mode == mode);
    CHECK(reader->info().chunk_size == chunk_size);
    CHECK(reader->info().cpu.vendor == "GenuineIntel");
    CHECK(reader->info().cpu.cpuid_hash == 0x1234abcdULL);
    CHECK(reader->info().created_unix_ms == 1764460800000ULL);
    CHECK(reader->section_names() == std::vector<std::string>{"vcpu.0", "devices"});
    auto devices = reader->section("devices");
    REQUIRE(devices);
    CHECK(std::vector<std::uint8_t>(devices->begin(), devices->end()) == contents.sections[1].bytes);
    auto missing = reader->section("nope");
    REQUIRE_FALSE(missing);
    CHECK(missing.error().message == "corrupt: no section nope");
    auto regions = reader->memory_regions();
    REQUIRE(regions.size() == 4);
    CHECK(regions[1] == GuestRange{3 << 20, 1 << 20});
    CHECK(std::vector<GuestRange>(reader->working_set().begin(), reader->working_set().end()) ==
          contents.working_set);

    auto dest = memory.empty_like();
    auto loaded = reader->load_memory(dest.views, threads);
    REQUIRE_MESSAGE(loaded, loaded.error().to_string());
    CHECK(loaded->memory_bytes == written->memory_bytes);
    CHECK(dest.same_bytes(memory));

    // Dirty destination: zero ranges must be cleared when asked.
    for (auto& v : dest.views) {
        std::memset(v.host.data(), 0x5a, v.host.size());
    }
    REQUIRE(reader->load_memory(dest.views, 1, /*dest_is_zeroed=*/false));
    CHECK(dest.same_bytes(memory));

    // Random access agrees with the eager load.
    std::vector<std::uint8_t> buf;
    std::uint64_t covered = 0;
    for (std::size_t i = 0; i < reader->chunk_count(); ++i) {
        auto ref = reader->chunk(i);
        CHECK(ref.length <= (ref.zero ? kMaxZeroRun : chunk_size));
        covered += ref.length;
        buf.assign(ref.length, 0xee);
        REQUIRE(reader->read_chunk(i, buf));
        auto at = reader->chunk_at(ref.guest_start + ref.length - 1);
        REQUIRE(at);
        CHECK(*at == i);
        for (const auto& v : memory.views) {
            if (ref.guest_start >= v.guest_start && ref.guest_start < v.guest_start + v.host.size()) {
                CHECK(std::memcmp(buf.data(), v.host.data() + (ref.guest_start - v.guest_start),
                                  ref.length) == 0);
            }
        }
    }
    CHECK(covered == written->memory_bytes);
    CHECK_FALSE(reader->chunk_at(2 << 20));  // in the gap
    CHECK_FALSE(reader->chunk_at(1ULL << 40));
    CHECK_FALSE(reader->read_chunk(reader->chunk_count(), buf));
}

}  // namespace

TEST_CASE("compressed snapshots round-trip with several chunk sizes and thread counts") {
    check_round_trip(MemoryMode::Compressed, 256 * 1024, 0);
    check_round_trip(MemoryMode::Compressed, 64 * 1024, 1);
    check_round_trip(MemoryMode::Compressed, 1024 * 1024, 3);
    check_round_trip(MemoryMode::Compressed, 192 * 1024, 2);
}

// Regression: a write from guest memory (an incompressible chunk) once
// released the compression buffer of a later chunk when it completed.
TEST_CASE("compressed round trips stay stable across repeats (slot reuse)") {
    for (int i = 0; i < 6; ++i) {
        check_round_trip(MemoryMode::Compressed, 64 * 1024, 2);
    }
}

TEST_CASE("raw snapshots round-trip through load_memory and read_chunk") {
    check_round_trip(MemoryMode::Raw, 256 * 1024, 0);
    check_round_trip(MemoryMode::Raw, 64 * 1024, 2);
}

TEST_CASE("a snapshot without memory or sections round-trips") {
    ScratchDir dir;
    SnapshotContents empty;
    REQUIRE(write_snapshot(dir.path("e"), empty));
    auto reader = SnapshotReader::open(dir.path("e"));
    REQUIRE_MESSAGE(reader, reader.error().to_string());
    CHECK(reader->section_names().empty());
    CHECK(reader->chunk_count() == 0);
    CHECK(reader->load_memory({}));
}

TEST_CASE("an all-zero region writes almost nothing") {
    ScratchDir dir;
    TestMemory memory;
    memory.add(0, 64 << 20, Fill::Zero);
    for (auto mode : {MemoryMode::Compressed, MemoryMode::Raw}) {
        const auto path = dir.path(mode == MemoryMode::Raw ? "raw" : "zstd");
        auto written = write_snapshot(path, make_contents(memory, mode, kDefaultChunkSize));
        REQUIRE(written);
        CHECK(written->zero_bytes == 64 << 20);
        CHECK(allocated_bytes(path) < 64 * 1024);
        if (mode == MemoryMode::Compressed) {
            CHECK(file_size(path) < 64 * 1024);
        }
        auto reader = SnapshotReader::open(path);
        REQUIRE(reader);
        CHECK(reader->chunk_count() == 1);  // one zero range
        CHECK(reader->chunk(0).zero);
    }
}

TEST_CASE("write throughput (printed, not asserted)") {
    ScratchDir dir;
    TestMemory memory;
    memory.add(0, 48 << 20, Fill::HalfZero, 9);
    memory.add(64 << 20, 16 << 20, Fill::Text, 4);
    for (auto mode : {MemoryMode::Compressed, MemoryMode::Raw}) {
        const auto path = dir.path("t");
        auto written = write_snapshot(path, make_contents(memory, mode, kDefaultChunkSize));
        REQUIRE(written);
        auto reader = SnapshotReader::open(path);
        REQUIRE(reader);
        auto dest = memory.empty_like();
        auto loaded = reader->load_memory(dest.views);
        REQUIRE(loaded);
        CHECK(dest.same_bytes(memory));
        MESSAGE(fmt::format(
            "{}: {} MiB memory ({} MiB zero) -> {} MiB file; write {:.0f} MiB/s, load {:.0f} MiB/s",
            mode == MemoryMode::Raw ? "raw" : "compressed", written->memory_bytes >> 20,
            written->zero_bytes >> 20, written->file_bytes >> 20,
            static_cast<double>(written->memory_bytes >> 20) / written->seconds,
            static_cast<double>(loaded->memory_bytes >> 20) / loaded->seconds));
    }
}

TEST_CASE("bad write input is refused before any file appears") {
    ScratchDir dir;
    TestMemory memory;
    memory.add(0x1000, 8192, Fill::Random);
    auto contents = make_contents(memory, MemoryMode::Compressed, kDefaultChunkSize);
    auto refuse = [&](const SnapshotContents& c, const WriteOptions& o = {}) {
        auto r = write_snapshot(dir.path("x"), c, o);
        REQUIRE_FALSE(r);
        CHECK(error_code(r.error()) == "invalid");
        CHECK(dir.entries().empty());
    };
    auto c = contents;
    c.info.chunk_size = 96 * 1024 + 1;
    refuse(c);
    c = contents;
    c.info.chunk_size = 32 * 1024;
    refuse(c);
    c = contents;
    c.sections.push_back(c.sections[0]);
    refuse(c);
    c = contents;
    c.sections[0].name.clear();
    refuse(c);
    c = contents;
    c.memory.push_back(c.memory[0]);  // overlaps
    refuse(c);
    c = contents;
    c.memory[0].guest_start = 0x1800;
    refuse(c);
    c = contents;
    c.working_set = {{0, 4096}};  // below the region
    refuse(c);
    c = contents;
    c.info.arch = "a-very-long-architecture";
    refuse(c);
    refuse(contents, {.zstd_level = 1000});
}

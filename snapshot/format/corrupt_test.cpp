#include <doctest/doctest.h>

#include <functional>

#include "snapshot/format/layout.hpp"
#include "snapshot/format/test_util.hpp"

using namespace sbx;
using namespace sbx::snapshot;
using namespace sbx::snapshot::test;

namespace {

struct Fixture {
    ScratchDir dir;
    TestMemory memory;
    std::string good = dir.path("good.snap");
    std::string bad = dir.path("bad.snap");
    std::vector<std::uint8_t> bytes;

    explicit Fixture(MemoryMode mode = MemoryMode::Compressed) {
        memory.add(0, 512 * 1024, Fill::HalfZero, 5);
        memory.add(1 << 20, 256 * 1024, Fill::Text, 6);
        auto contents = make_contents(memory, mode, 64 * 1024);
        contents.working_set = {{0, 4096}};
        auto w = write_snapshot(good, contents);
        REQUIRE_MESSAGE(w, w.error().to_string());
        bytes = read_bytes(good);
    }

    [[nodiscard]] layout::Header header() const {
        auto h = layout::decode_header(bytes, bytes.size());
        REQUIRE(h);
        return *h;
    }
    [[nodiscard]] layout::Trailer trailer() const {
        auto h = header();
        auto t = layout::decode_trailer(std::span(bytes).subspan(h.trailer_offset), h);
        REQUIRE(t);
        return *t;
    }
    // Writes `bad` with an edited header/trailer, both re-checksummed (a
    // structurally hostile but checksum-valid file).
    void rewrite(const std::function<void(layout::Header&, layout::Trailer&)>& edit) {
        auto h = header();
        auto t = trailer();
        edit(h, t);
        auto tb = layout::encode_trailer(t);
        std::vector<std::uint8_t> out(bytes.begin(),
                                      bytes.begin() + static_cast<std::ptrdiff_t>(h.trailer_offset));
        out.insert(out.end(), tb.begin(), tb.end());
        h.trailer_bytes = tb.size();
        h.trailer_checksum = layout::checksum(tb);
        h.file_bytes = out.size();
        auto hb = layout::encode_header(h);
        std::copy(hb.begin(), hb.end(), out.begin());
        write_bytes(bad, out);
    }
    std::string flip(std::uint64_t offset) {
        auto copy = bytes;
        copy.at(offset) ^= 0x40;
        write_bytes(bad, copy);
        return open_code(bad);
    }
    [[nodiscard]] std::size_t first_data_chunk(layout::ChunkKind kind) const {
        auto t = trailer();
        for (std::size_t i = 0; i < t.chunks.size(); ++i) {
            if (t.chunks[i].kind == kind) {
                return i;
            }
        }
        FAIL("no chunk of that kind");
        return 0;
    }
    [[nodiscard]] std::string load_code() const {
        auto r = SnapshotReader::open(bad);
        REQUIRE_MESSAGE(r, r.error().to_string());
        auto dest = memory.empty_like();
        auto loaded = r->load_memory(dest.views, 2);
        return loaded ? "ok" : std::string(error_code(loaded.error()));
    }
};

}  // namespace

TEST_CASE("the header's magic, version and arch are checked in that order") {
    Fixture f;
    CHECK(open_code(f.good) == "ok");
    CHECK(f.flip(0) == "bad_magic");
    CHECK(f.flip(7) == "bad_magic");
    auto future = f.bytes;
    future[8] = 2;
    write_bytes(f.bad, future);
    auto r = SnapshotReader::open(f.bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.starts_with("unsupported_version: "));
    CHECK(r.error().message.find("format version 2") != std::string::npos);

    auto contents = make_contents(f.memory, MemoryMode::Compressed, kDefaultChunkSize);
    contents.info.arch = "riscv64";
    REQUIRE(write_snapshot(f.bad, contents));
    CHECK(open_code(f.bad) == "wrong_arch");
    CHECK(open_code(f.dir.path("absent")) == "io");
}

TEST_CASE("a truncated file is a clean truncated error at every length") {
    Fixture f;
    for (std::size_t size = 0; size < f.bytes.size(); size += 509) {
        write_bytes(f.bad, std::span(f.bytes).first(size));
        CHECK_MESSAGE(open_code(f.bad) == "truncated", "size ", size);
    }
    for (std::size_t size : {std::size_t{11}, std::size_t{127}, f.bytes.size() - 1}) {
        write_bytes(f.bad, std::span(f.bytes).first(size));
        CHECK_MESSAGE(open_code(f.bad) == "truncated", "size ", size);
    }
    auto longer = f.bytes;
    longer.push_back(0);
    write_bytes(f.bad, longer);
    CHECK(open_code(f.bad) == "corrupt");
}

TEST_CASE("a flipped byte in header, section or trailer is a checksum mismatch at open") {
    Fixture f;
    CHECK(f.flip(40) == "checksum_mismatch");                  // CPU vendor
    CHECK(f.flip(100) == "checksum_mismatch");                 // trailer size
    CHECK(f.flip(127) == "checksum_mismatch");                 // the checksum itself
    CHECK(f.flip(layout::kDataStart) == "checksum_mismatch");  // first section byte
    auto h = f.header();
    CHECK(f.flip(h.trailer_offset) == "checksum_mismatch");
    CHECK(f.flip(h.file_bytes - 1) == "checksum_mismatch");  // working set, the trailer's last field
}

TEST_CASE("a flipped byte in chunk data fails load_memory and read_chunk, never open") {
    for (auto mode : {MemoryMode::Compressed, MemoryMode::Raw}) {
        Fixture f(mode);
        auto kind = mode == MemoryMode::Raw ? layout::ChunkKind::Plain : layout::ChunkKind::Zstd;
        auto index = f.first_data_chunk(kind);
        auto c = f.trailer().chunks[index];
        CHECK(f.flip(c.file_offset + c.stored_bytes / 2) == "ok");
        CHECK(f.load_code() == "checksum_mismatch");
        auto r = SnapshotReader::open(f.bad);
        REQUIRE(r);
        std::vector<std::uint8_t> buf(c.length);
        auto read = r->read_chunk(index, buf);
        REQUIRE_FALSE(read);
        CHECK(error_code(read.error()) == "checksum_mismatch");
        if (mode == MemoryMode::Raw) {
            CHECK(error_code(r->verify_raw_memory().error()) == "checksum_mismatch");
        }
    }
}

TEST_CASE("a checksum-valid chunk that is not a zstd frame of the right size is corrupt") {
    Fixture f;
    auto index = f.first_data_chunk(layout::ChunkKind::Zstd);
    auto c = f.trailer().chunks[index];
    for (std::uint32_t i = 0; i < c.stored_bytes; ++i) {
        f.bytes[c.file_offset + i] = static_cast<std::uint8_t>(i * 7);
    }
    f.rewrite([&](layout::Header&, layout::Trailer& t) {
        t.chunks[index].checksum =
            layout::checksum(std::span(f.bytes).subspan(c.file_offset, c.stored_bytes));
    });
    CHECK(f.load_code() == "corrupt");
}

TEST_CASE("structural nonsense in a checksum-valid trailer is corrupt at open") {
    using layout::ChunkKind;
    Fixture f;
    auto expect_corrupt = [&](const char* what,
                              const std::function<void(layout::Header&, layout::Trailer&)>& edit) {
        f.rewrite(edit);
        CHECK_MESSAGE(open_code(f.bad) == "corrupt", what);
    };
    f.rewrite([](layout::Header&, layout::Trailer&) {});
    REQUIRE(open_code(f.bad) == "ok");
    const auto zstd = f.first_data_chunk(ChunkKind::Zstd);

    expect_corrupt("overlapping chunks", [&](auto&, auto& t) {
        auto other = zstd + 1;
        while (t.chunks[other].kind == ChunkKind::Zero) {
            ++other;
        }
        t.chunks[other].file_offset = t.chunks[zstd].file_offset + 1;
    });
    expect_corrupt("chunk past the trailer",
                   [&](auto& h, auto& t) { t.chunks[zstd].file_offset = h.trailer_offset; });
    expect_corrupt("chunk offset wraps", [&](auto&, auto& t) { t.chunks[zstd].file_offset = ~0ULL - 8; });
    expect_corrupt("chunk in the header page", [&](auto&, auto& t) { t.chunks[zstd].file_offset = 64; });
    expect_corrupt("section over a chunk",
                   [&](auto&, auto& t) { t.sections[1].offset = t.chunks[zstd].file_offset; });
    expect_corrupt("section outside file", [&](auto&, auto& t) { t.sections[0].bytes = 1ULL << 40; });
    expect_corrupt("duplicate section", [&](auto&, auto& t) { t.sections[1].name = t.sections[0].name; });
    expect_corrupt("chunk out of place", [&](auto&, auto& t) { t.chunks[zstd].guest_start += 4096; });
    expect_corrupt("missing chunk", [&](auto&, auto& t) { t.chunks.pop_back(); });
    expect_corrupt("extra chunk", [&](auto&, auto& t) { t.chunks.push_back(t.chunks.back()); });
    expect_corrupt("zstd not smaller",
                   [&](auto&, auto& t) { t.chunks[zstd].stored_bytes = t.chunks[zstd].length; });
    expect_corrupt("unknown kind", [&](auto&, auto& t) { t.chunks[zstd].kind = static_cast<ChunkKind>(9); });
    expect_corrupt("short chunk", [&](auto&, auto& t) { t.chunks[zstd].length -= 4096; });
    expect_corrupt("zero range with data", [&](auto&, auto& t) {
        for (auto& c : t.chunks) {
            if (c.kind == ChunkKind::Zero) {
                c.stored_bytes = 16;
                break;
            }
        }
    });
    expect_corrupt("overlapping regions", [&](auto&, auto& t) { t.regions[1].guest_start = 4096 * 4; });
    expect_corrupt("unaligned region", [&](auto&, auto& t) { t.regions[1].guest_start += 1; });
    expect_corrupt("region wraps", [&](auto&, auto& t) { t.regions[1].guest_start = ~0ULL - 4095; });
    expect_corrupt("raw offset in compressed mode", [&](auto&, auto& t) { t.regions[0].file_offset = 4096; });
    expect_corrupt("working set outside memory", [&](auto&, auto& t) {
        t.working_set = {{1ULL << 40, 4096}};
    });
    expect_corrupt("trailer not at end", [&](auto& h, auto&) { h.trailer_offset -= 1; });
    expect_corrupt("bad chunk size", [&](auto& h, auto&) { h.info.chunk_size = 4096; });
    expect_corrupt("bad mode", [&](auto& h, auto&) { h.info.mode = static_cast<MemoryMode>(7); });
}

TEST_CASE("hostile counts in the trailer are refused without allocating") {
    Fixture f;
    auto h = f.header();
    auto patch_count = [&](std::size_t at) {
        auto copy = f.bytes;
        copy[at] = copy[at + 1] = copy[at + 2] = copy[at + 3] = 0xff;
        auto tb = std::span(copy).subspan(h.trailer_offset);
        auto hh = h;
        hh.trailer_checksum = layout::checksum(tb);
        auto hb = layout::encode_header(hh);
        std::copy(hb.begin(), hb.end(), copy.begin());
        write_bytes(f.bad, copy);
        return open_code(f.bad);
    };
    CHECK(patch_count(h.trailer_offset) == "corrupt");  // section count
}

TEST_CASE("raw-mode structure: chunks must sit at their region's offset") {
    Fixture f(MemoryMode::Raw);
    auto plain = f.first_data_chunk(layout::ChunkKind::Plain);
    f.rewrite([&](auto&, auto& t) { t.chunks[plain].file_offset += 4096; });
    CHECK(open_code(f.bad) == "corrupt");
    f.rewrite([&](auto&, auto& t) { t.regions[1].file_offset = t.regions[0].file_offset; });
    CHECK(open_code(f.bad) == "corrupt");
    f.rewrite([&](auto&, auto& t) { t.regions[0].file_offset += 512; });
    CHECK(open_code(f.bad) == "corrupt");
}

TEST_CASE("load_memory refuses a destination that does not match the regions") {
    Fixture f;
    auto r = SnapshotReader::open(f.good);
    REQUIRE(r);
    auto dest = f.memory.empty_like();
    auto views = dest.views;
    views.pop_back();
    auto loaded = r->load_memory(views);
    REQUIRE_FALSE(loaded);
    CHECK(error_code(loaded.error()) == "corrupt");
    views = dest.views;
    views[1].host = views[1].host.first(4096);
    CHECK_FALSE(r->load_memory(views));
    views = dest.views;
    views[1].guest_start += 4096;
    CHECK_FALSE(r->load_memory(views));
}

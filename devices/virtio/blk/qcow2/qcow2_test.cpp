// qcow2 images on real files, with our code only: overlays created and
// written over raw and qcow2 backing files (checked against a byte model
// of the disk), chains three deep, write-zeroes and discard, reopening,
// and hostile or unsupported images refused with their code. The checks
// with qemu-img are in qcow2_qemu_img_test.cpp.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <random>

#include "devices/virtio/blk/qcow2/qcow2_test_util.hpp"

using namespace sbx;
using namespace sbx::qcow2;
using namespace sbx::qcow2::testing;

namespace {

constexpr std::uint64_t kCluster = 64 * 1024;

// A small overlay on a patterned raw base, and the model of its disk.
struct Fixture {
    TempDir dir;
    std::string base = dir.file("base.raw");
    std::string overlay = dir.file("overlay.qcow2");
    Model model;

    explicit Fixture(std::uint64_t bytes = 4 << 20) {
        model.bytes = patterned(bytes, 1);
        write_file(base, model.bytes);
        auto r = create_overlay(overlay, "base.raw", BackingFormat::Raw, 0);
        REQUIRE_MESSAGE(r, (r ? "" : r.error().to_string()));
    }
};

void check_matches(Image& image, const Model& model) {
    CHECK(read_disk(image, 0, model.bytes.size()) == model.bytes);
}

// Reads the big-endian u64 at `offset` of a file image in memory.
std::uint64_t be64_at(const Bytes& file, std::uint64_t offset) {
    return load_be64(&file[offset]);
}

}  // namespace

TEST_CASE("a new overlay reads as its raw base and is a few clusters") {
    Fixture f;
    auto image = open_image(f.overlay);
    CHECK(image->size() == f.model.bytes.size());
    CHECK(image->header().backing_name == "base.raw");
    CHECK(image->header().backing_format == BackingFormat::Raw);
    check_matches(*image, f.model);
    struct stat st {};
    REQUIRE(::stat(f.overlay.c_str(), &st) == 0);
    CHECK(st.st_size == 4 * kCluster);  // header, refcount table and block, L1
}

TEST_CASE("writes land in the overlay, the base is untouched, and they survive a reopen") {
    Fixture f;
    const Bytes base_before = read_file_bytes(f.base);
    {
        auto image = open_image(f.overlay);
        const Bytes a = patterned(512, 7);
        REQUIRE(image->write(0, a));  // part of cluster 0: copy-on-write from the base
        f.model.write(0, a);
        const Bytes b = patterned(3 * kCluster + 1024, 9);  // across four clusters, unaligned ends
        REQUIRE(image->write(kCluster - 512, b));
        f.model.write(kCluster - 512, b);
        const Bytes c = patterned(kCluster, 11);  // a whole cluster: no copy
        REQUIRE(image->write(2 * kCluster, c));
        f.model.write(2 * kCluster, c);
        REQUIRE(image->write(100, Bytes(7, 0xee)));  // in place: the cluster is ours now
        f.model.write(100, Bytes(7, 0xee));
        check_matches(*image, f.model);
        REQUIRE(image->flush());
    }
    CHECK(read_file_bytes(f.base) == base_before);
    auto image = open_image(f.overlay, false);
    check_matches(*image, f.model);
}

TEST_CASE("random writes, write-zeroes and discards match a byte model") {
    Fixture f(8 << 20);
    auto image = open_image(f.overlay);
    std::mt19937_64 rng(42);
    for (int i = 0; i < 300; ++i) {
        const std::uint64_t len = 512 * (1 + rng() % 300);
        const std::uint64_t offset = 512 * (rng() % ((f.model.bytes.size() - len) / 512));
        switch (rng() % 4) {
            case 0:
            case 1: {
                const Bytes data = patterned(len, static_cast<std::uint8_t>(i));
                REQUIRE(image->write(offset, data));
                f.model.write(offset, data);
                break;
            }
            case 2:
                REQUIRE(image->write_zeroes(offset, len, /*unmap=*/rng() % 2 == 0));
                f.model.zero(offset, len);
                break;
            default: {
                // A discard drops whole clusters only; those read as zeroes.
                REQUIRE(image->discard(offset, len));
                const std::uint64_t first = (offset + kCluster - 1) / kCluster * kCluster;
                const std::uint64_t end = (offset + len) / kCluster * kCluster;
                if (end > first) {
                    f.model.zero(first, end - first);
                }
                break;
            }
        }
        if (i % 50 == 0) {
            REQUIRE(image->flush());
        }
    }
    check_matches(*image, f.model);
    REQUIRE(image->flush());
    CHECK(image->pending_releases() == 0);
    image.reset();
    check_matches(*open_image(f.overlay), f.model);
}

TEST_CASE("zeroing whole clusters hides the base and releases the overlay's clusters at the flush") {
    Fixture f;
    auto image = open_image(f.overlay);
    REQUIRE(image->write(0, patterned(2 * kCluster, 3)));
    REQUIRE(image->write_zeroes(0, 2 * kCluster));
    REQUIRE(image->write_zeroes(4 * kCluster, kCluster));  // never written: a zero cluster over the base
    CHECK(image->pending_releases() == 2);
    CHECK(read_disk(*image, 0, 2 * kCluster) == Bytes(2 * kCluster, 0));
    CHECK(read_disk(*image, 4 * kCluster, kCluster) == Bytes(kCluster, 0));
    CHECK(read_disk(*image, 5 * kCluster, 512) ==
          Bytes(f.model.bytes.begin() + 5 * kCluster, f.model.bytes.begin() + 5 * kCluster + 512));
    REQUIRE(image->flush());
    CHECK(image->pending_releases() == 0);
    // Writing again allocates a fresh cluster that reads back.
    REQUIRE(image->write(0, Bytes(512, 0x5a)));
    CHECK(read_disk(*image, 0, 512) == Bytes(512, 0x5a));
    CHECK(read_disk(*image, 512, 512) == Bytes(512, 0));
}

TEST_CASE("write-zeroes without unmap keeps the cluster, which a later write fills in place") {
    Fixture f;
    auto image = open_image(f.overlay);
    REQUIRE(image->write(0, patterned(kCluster, 3)));
    REQUIRE(image->write_zeroes(0, kCluster, /*unmap=*/false));
    CHECK(image->pending_releases() == 0);
    CHECK(read_disk(*image, 0, kCluster) == Bytes(kCluster, 0));
    struct stat before {};
    REQUIRE(::stat(f.overlay.c_str(), &before) == 0);
    REQUIRE(image->write(4096, Bytes(512, 0x77)));
    struct stat after {};
    REQUIRE(::stat(f.overlay.c_str(), &after) == 0);
    CHECK(after.st_size == before.st_size);  // no new cluster
    Bytes expected(kCluster, 0);
    std::fill_n(expected.begin() + 4096, 512, 0x77);
    CHECK(read_disk(*image, 0, kCluster) == expected);
}

TEST_CASE("a three-deep chain: raw base, two qcow2 overlays, the top one written") {
    TempDir dir;
    Model model{patterned(2 << 20, 5)};
    write_file(dir.file("base.raw"), model.bytes);
    REQUIRE(create_overlay(dir.file("mid.qcow2"), "base.raw", BackingFormat::Raw, 0));
    {
        auto mid = open_image(dir.file("mid.qcow2"));
        const Bytes data = patterned(3 * kCluster, 8);
        REQUIRE(mid->write(kCluster / 2, data));
        model.write(kCluster / 2, data);
        REQUIRE(mid->write_zeroes(5 * kCluster, kCluster));
        model.zero(5 * kCluster, kCluster);
    }
    REQUIRE(create_overlay(dir.file("top.qcow2"), dir.file("mid.qcow2"), BackingFormat::Qcow2, 0));
    REQUIRE(create_overlay(dir.file("leaf.qcow2"), "top.qcow2", BackingFormat::Qcow2, 0));
    auto leaf = open_image(dir.file("leaf.qcow2"));
    check_matches(*leaf, model);
    const Bytes data = patterned(kCluster + 4096, 12);
    REQUIRE(leaf->write(kCluster - 2048, data));
    model.write(kCluster - 2048, data);
    check_matches(*leaf, model);
}

TEST_CASE("a backing file shorter than the overlay reads as zeroes past its end") {
    TempDir dir;
    write_file(dir.file("small.raw"), patterned(100 * 512, 2));
    REQUIRE(create_overlay(dir.file("o.qcow2"), "small.raw", BackingFormat::Raw, 1 << 20));
    auto image = open_image(dir.file("o.qcow2"));
    Model model{Bytes(1 << 20, 0)};
    model.write(0, patterned(100 * 512, 2));
    check_matches(*image, model);
    REQUIRE(image->write(90 * 512, Bytes(20 * 512, 0x11)));  // one cluster, half past the base's end
    model.write(90 * 512, Bytes(20 * 512, 0x11));
    check_matches(*image, model);
}

TEST_CASE("an image without backing file, with 512-byte clusters") {
    TempDir dir;
    REQUIRE(create_overlay(dir.file("plain.qcow2"), "", BackingFormat::None, 1 << 20, {.cluster_bits = 9}));
    auto image = open_image(dir.file("plain.qcow2"));
    Model model{Bytes(1 << 20, 0)};
    check_matches(*image, model);
    // Past the first refcount block's 256 clusters: a second block is made.
    const Bytes data = patterned(300 * 512, 4);
    REQUIRE(image->write(1000, data));
    model.write(1000, data);
    check_matches(*image, model);
    image.reset();
    check_matches(*open_image(dir.file("plain.qcow2")), model);
}

TEST_CASE("creating an overlay of a 10 GiB base is O(1)") {
    TempDir dir;
    const std::string base = dir.file("big.raw");
    int fd = ::open(base.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 10LL << 30) == 0);
    ::close(fd);
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(create_overlay(dir.file("big.qcow2"), base, BackingFormat::Raw, 0));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("created a qcow2 overlay of a 10 GiB raw base in %.3f ms\n", ms);
    auto image = open_image(dir.file("big.qcow2"));
    CHECK(image->size() == 10ULL << 30);
    struct stat st {};
    REQUIRE(::stat(dir.file("big.qcow2").c_str(), &st) == 0);
    CHECK(st.st_size == 4 * kCluster);
}

TEST_CASE("create_overlay refuses what it cannot make") {
    TempDir dir;
    write_file(dir.file("base.raw"), patterned(4096, 1));
    auto missing = create_overlay(dir.file("a.qcow2"), "nope.raw", BackingFormat::Raw, 0);
    REQUIRE(!missing);
    CHECK(missing.error().code == kCodeBacking);
    REQUIRE(create_overlay(dir.file("a.qcow2"), "base.raw", BackingFormat::Raw, 0));
    CHECK(!create_overlay(dir.file("a.qcow2"), "base.raw", BackingFormat::Raw, 0));  // exists already
    CHECK(!create_overlay(dir.file("b.qcow2"), "base.raw", BackingFormat::Raw, 1000));
    CHECK(!create_overlay(dir.file("c.qcow2"), "", BackingFormat::None, 0));
    CHECK(::access(dir.file("b.qcow2").c_str(), F_OK) != 0);
}

namespace {

// A fresh 1 GiB image (two L1 entries) without backing and one written
// cluster, as bytes.
Bytes sample_image(const TempDir& dir) {
    const std::string path = dir.file("sample.qcow2");
    REQUIRE(create_overlay(path, "", BackingFormat::None, 1 << 30));
    {
        auto image = open_image(path);
        REQUIRE(image->write(0, patterned(kCluster, 6)));
    }
    return read_file_bytes(path);
}

void check_refused(const TempDir& dir, const Bytes& bytes, std::string_view code, std::string_view words) {
    INFO("expecting a refusal naming: ", words);
    const std::string path = dir.file("hostile.qcow2");
    write_file(path, bytes);
    auto image = try_open(path);
    REQUIRE(!image);
    CHECK(image.error().code == code);
    CHECK_MESSAGE(image.error().message.find(words) != std::string::npos, image.error().message);
}

void put64(Bytes& b, std::uint64_t at, std::uint64_t v) {
    store_be64(&b[at], v);
}
void put32(Bytes& b, std::uint64_t at, std::uint32_t v) {
    store_be32(&b[at], v);
}

}  // namespace

TEST_CASE("unsupported and hostile images only fail to open, each with its code") {
    TempDir dir;
    const Bytes good = sample_image(dir);
    const std::uint64_t l1 = be64_at(good, 40);
    const std::uint64_t l2 = be64_at(good, l1) & kOffsetMask;
    REQUIRE(l2 != 0);
    auto with = [&](auto&& patch) {
        Bytes b = good;
        patch(b);
        return b;
    };
    check_refused(dir, with([](Bytes& b) { put32(b, 4, 2); }), kCodeUnsupported, "version 2");
    check_refused(dir, with([](Bytes& b) { put32(b, 32, 1); }), kCodeUnsupported, "encryption");
    check_refused(dir, with([](Bytes& b) { put32(b, 60, 1); }), kCodeUnsupported, "internal snapshots");
    check_refused(dir, with([](Bytes& b) { put64(b, 72, kIncompatDirty); }), kCodeUnsupported, "dirty");
    check_refused(dir, with([](Bytes& b) { put64(b, 72, kIncompatDataFile); }), kCodeUnsupported, "external");
    check_refused(dir, with([](Bytes& b) { put64(b, 72, kIncompatCompression); }), kCodeUnsupported,
                  "compression");
    check_refused(dir, with([](Bytes& b) { put64(b, 72, kIncompatExtendedL2); }), kCodeUnsupported,
                  "extended L2");
    check_refused(dir, with([](Bytes& b) { put64(b, 72, 1ULL << 40); }), kCodeUnsupported, "unknown");
    check_refused(dir, with([](Bytes& b) { put32(b, 96, 3); }), kCodeUnsupported, "refcount_order");
    check_refused(dir, with([&](Bytes& b) { put64(b, l2, be64_at(good, l2) | kFlagCompressed); }),
                  kCodeUnsupported, "compressed");
    check_refused(dir, with([](Bytes& b) { b[0] = 'X'; }), kCodeCorrupt, "magic");
    check_refused(dir, with([](Bytes& b) { put32(b, 20, 30); }), kCodeCorrupt, "cluster_bits");
    check_refused(dir, with([](Bytes& b) { put64(b, 40, 1ULL << 40); }), kCodeCorrupt, "l1_table_offset");
    check_refused(dir, with([](Bytes& b) { put64(b, 40, kCluster + 8); }), kCodeCorrupt, "l1_table_offset");
    check_refused(dir, with([](Bytes& b) { put32(b, 36, 0x7fffffff); }), kCodeCorrupt, "l1_size");
    check_refused(dir, with([](Bytes& b) { put32(b, 36, 0); }), kCodeCorrupt, "l1_size");
    check_refused(dir, with([](Bytes& b) { put64(b, 24, 1ULL << 62); }), kCodeCorrupt, "disk size");
    check_refused(dir, with([](Bytes& b) { put32(b, 56, 100000); }), kCodeCorrupt, "refcount table");
    check_refused(dir, with([](Bytes& b) { put64(b, 48, 12345); }), kCodeCorrupt, "refcount table");
    check_refused(dir, with([](Bytes& b) { put64(b, kCluster, 1ULL << 45); }), kCodeCorrupt,
                  "refcount table entry");
    check_refused(dir, with([](Bytes& b) { put32(b, 100, 50); }), kCodeCorrupt, "header_length");
    check_refused(dir, with([&](Bytes& b) { put64(b, l1, (1ULL << 44) | kFlagCopied); }), kCodeCorrupt,
                  "L1 entry");
    check_refused(dir, with([&](Bytes& b) { put64(b, l1 + 8, be64_at(good, l1)); }), kCodeCorrupt,
                  "same L2 table");
    check_refused(dir, with([&](Bytes& b) { put64(b, l2, be64_at(good, l2) | 2); }), kCodeCorrupt,
                  "reserved bits");
    check_refused(dir, with([&](Bytes& b) { put64(b, l2 + 8, (1ULL << 40) | kFlagCopied); }), kCodeCorrupt,
                  "not a cluster");
    // A backing name past the header cluster, and an extension that runs
    // past it.
    check_refused(dir, with([](Bytes& b) {
                      put64(b, 8, 2 * kCluster - 4);
                      put32(b, 16, 100);
                  }),
                  kCodeCorrupt, "backing file name");
    check_refused(dir, with([](Bytes& b) {
                      put32(b, kHeaderBytes, 0x12345678);
                      put32(b, kHeaderBytes + 4, 0xfffffff0);
                  }),
                  kCodeCorrupt, "header extension");
    check_refused(dir, with([](Bytes& b) {
                      put32(b, kHeaderBytes, kExtDataFile);
                      put32(b, kHeaderBytes + 4, 4);
                  }),
                  kCodeUnsupported, "external data file");
    // Truncated: the header alone, a cut L1 table, a cut L2 table.
    check_refused(dir, Bytes(good.begin(), good.begin() + 50), kCodeCorrupt, "too short");
    check_refused(dir, Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(l1)), kCodeCorrupt,
                  "l1_table_offset");
    check_refused(dir, Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(l2 + 100)),
                  kCodeCorrupt, "L1 entry");
    // The untouched image still opens: the refusals came from the patches.
    write_file(dir.file("intact.qcow2"), good);
    CHECK(try_open(dir.file("intact.qcow2")));
}

TEST_CASE("backing chains that cannot open are refused") {
    TempDir dir;
    write_file(dir.file("base.raw"), patterned(1 << 20, 1));
    REQUIRE(create_overlay(dir.file("o.qcow2"), "base.raw", BackingFormat::Raw, 0));
    ::unlink(dir.file("base.raw").c_str());
    auto gone = try_open(dir.file("o.qcow2"));
    REQUIRE(!gone);
    CHECK(gone.error().code == kCodeBacking);

    // An image that is its own backing file loops until the depth limit.
    REQUIRE(create_overlay(dir.file("loop.qcow2"), "", BackingFormat::None, 1 << 20));
    {
        Bytes b = read_file_bytes(dir.file("loop.qcow2"));
        const std::string name = "loop.qcow2";
        put64(b, 8, 1024);
        put32(b, 16, static_cast<std::uint32_t>(name.size()));
        std::copy(name.begin(), name.end(), b.begin() + 1024);
        write_file(dir.file("loop.qcow2"), b);
    }
    auto loop = try_open(dir.file("loop.qcow2"));
    REQUIRE(!loop);
    CHECK(loop.error().code == kCodeBacking);
    CHECK_MESSAGE(loop.error().message.find("deeper than") != std::string::npos, loop.error().message);
}

TEST_CASE("writes past the disk are refused and change nothing") {
    Fixture f;
    auto image = open_image(f.overlay);
    CHECK(!image->write(f.model.bytes.size() - 512, Bytes(1024, 1)));
    CHECK(!image->write_zeroes(f.model.bytes.size(), 512));
    check_matches(*image, f.model);
    auto read_only = open_image(f.overlay, false);
    CHECK(!read_only->write(0, Bytes(512, 1)));
}

namespace {

// The bytes an extent names, read straight from its file.
Bytes read_extent_bytes(const Extent& e, std::size_t len) {
    Bytes out(len);
    REQUIRE(::pread(e.fd, out.data(), len, static_cast<off_t>(e.offset)) == static_cast<ssize_t>(len));
    return out;
}

}  // namespace

TEST_CASE("extents: contiguous ranges of one file, for transfers outside the library") {
    Fixture f;
    auto image = open_image(f.overlay);
    // Unwritten: the raw base at the same offset.
    auto base = image->read_extent(1000, 5000);
    REQUIRE(base);
    REQUIRE(base->has_value());
    CHECK((*base)->offset == 1000);
    CHECK(read_extent_bytes(**base, 5000) ==
          Bytes(f.model.bytes.begin() + 1000, f.model.bytes.begin() + 6000));
    auto write_base = image->write_extent(1000, 5000);
    REQUIRE(write_base);
    CHECK(!write_base->has_value());  // a write there needs an allocation

    // Three clusters written by one write are allocated back to back (once
    // the L2 table exists: the first write also allocates it).
    REQUIRE(image->write(10 * kCluster, Bytes(512, 1)));
    f.model.write(10 * kCluster, Bytes(512, 1));
    const Bytes data = patterned(3 * kCluster, 4);
    REQUIRE(image->write(0, data));
    f.model.write(0, data);
    for (bool for_write : {false, true}) {
        auto e = for_write ? image->write_extent(100, 3 * kCluster - 200)
                           : image->read_extent(100, 3 * kCluster - 200);
        REQUIRE(e);
        REQUIRE(e->has_value());
        CHECK((*e)->fd != (*base)->fd);
        CHECK(read_extent_bytes(**e, 3 * kCluster - 200) == Bytes(data.begin() + 100, data.end() - 100));
    }
    // Allocated then unallocated, zero clusters, unbacked holes: none.
    CHECK(!image->read_extent(2 * kCluster, 2 * kCluster)->has_value());
    REQUIRE(image->write_zeroes(4 * kCluster, kCluster));
    CHECK(!image->read_extent(4 * kCluster, 512)->has_value());
    CHECK(!image->read_extent(f.model.bytes.size() - 512, 1024)->has_value());

    TempDir dir;
    REQUIRE(create_overlay(dir.file("plain.qcow2"), "", BackingFormat::None, 1 << 20));
    CHECK(!open_image(dir.file("plain.qcow2"))->read_extent(0, 512)->has_value());
}

TEST_CASE("extents reach through a qcow2 backing file to where the data is") {
    Fixture f;
    {
        auto mid = open_image(f.overlay);
        REQUIRE(mid->write(kCluster, patterned(kCluster, 8)));
    }
    const std::string leaf_path = f.dir.file("leaf.qcow2");
    REQUIRE(create_overlay(leaf_path, "overlay.qcow2", BackingFormat::Qcow2, 0));
    auto leaf = open_image(leaf_path);
    auto e = leaf->read_extent(kCluster + 10, 1000);
    REQUIRE(e);
    REQUIRE(e->has_value());
    const Bytes expected = patterned(kCluster, 8);
    CHECK(read_extent_bytes(**e, 1000) == Bytes(expected.begin() + 10, expected.begin() + 1010));
}

TEST_CASE("whole-cluster writes allocate runs back to back and rewrite them in place") {
    Fixture f;
    auto image = open_image(f.overlay);
    const Bytes first = patterned(10 * kCluster, 21);
    REQUIRE(image->write(0, first));
    f.model.write(0, first);
    struct stat st {};
    REQUIRE(::stat(f.overlay.c_str(), &st) == 0);
    CHECK(st.st_size == (4 + 10 + 1) * kCluster);  // the run, then its L2 table
    auto e = image->read_extent(0, 10 * kCluster);
    REQUIRE(e);
    CHECK(e->has_value());
    REQUIRE(image->write(kCluster, patterned(4 * kCluster, 22)));  // in place
    f.model.write(kCluster, patterned(4 * kCluster, 22));
    REQUIRE(::stat(f.overlay.c_str(), &st) == 0);
    CHECK(st.st_size == (4 + 10 + 1) * kCluster);
    // Owned clusters, then new ones, then a partial one: three kinds in one write.
    const Bytes mixed = patterned(5 * kCluster + 3000, 23);
    REQUIRE(image->write(8 * kCluster, mixed));
    f.model.write(8 * kCluster, mixed);
    check_matches(*image, f.model);
    image.reset();
    check_matches(*open_image(f.overlay), f.model);
}

// virtio-blk over qcow2 overlays, driven through the mmio transport by the
// mock driver: the disk is the overlay's virtual size, reads come from the
// base until written, writes, flush, write-zeroes and discard change only
// the overlay, snapshots flush it, and a hostile image fails to open with
// its code. After the device is gone, qemu-img check and compare (when
// installed) agree with what the driver wrote.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include "devices/virtio/blk/blk_test_util.hpp"
#include "devices/virtio/blk/qcow2/qcow2_create.hpp"
#include "devices/virtio/blk/qcow2/qcow2_test_util.hpp"

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::testing;
using namespace sbx::virtio::blk_testing;
namespace q = sbx::qcow2;

namespace {

constexpr std::uint64_t kCluster = 64 * 1024;

// A 4 MiB patterned raw base and an overlay on it, with the disk's model.
struct Overlay {
    TempImage base{4 << 20};
    q::testing::TempDir dir;
    std::string path = dir.file("disk.qcow2");
    q::testing::Model model{base.read(0, 4 << 20)};

    Overlay() { REQUIRE(q::create_overlay(path, base.path, q::BackingFormat::Raw, 0)); }

    Bytes read_back(std::uint64_t offset, std::size_t len) const {
        auto image = q::testing::open_image(path, false);
        return q::testing::read_disk(*image, offset, len);
    }

    // qemu-img's view, where it is installed.
    void check_with_qemu_img() const {
        if (q::testing::run_command("qemu-img --version").status != 0) {
            MESSAGE("qemu-img not installed: image not checked by it");
            return;
        }
        const auto check = q::testing::run_command("qemu-img check -f qcow2 '" + path + "'");
        INFO(check.output);
        CHECK(check.status == 0);
        const std::string expected = dir.file("expected.raw");
        q::testing::write_file(expected, model.bytes);
        const auto compare =
            q::testing::run_command("qemu-img compare -f qcow2 -F raw '" + path + "' '" + expected + "'");
        INFO(compare.output);
        CHECK(compare.status == 0);
    }
};

}  // namespace

TEST_CASE("a qcow2 overlay: capacity, discard and write-zeroes offered per cluster") {
    Overlay o;
    TestBed bed(open_disk(o.path));
    CHECK(disk_of(bed).is_qcow2());
    CHECK(disk_of(bed).capacity_sectors() == (4 << 20) / kSector);
    const std::uint64_t f = bed.device_features();
    CHECK((f & blk::kFeatureDiscard) != 0);
    CHECK((f & blk::kFeatureWriteZeroes) != 0);
    CHECK(bed.config32(offsetof(blk::ConfigSpace, discard_sector_alignment)) == kCluster / kSector);
}

TEST_CASE("a qcow2 overlay reads its base, keeps the driver's writes, zeroes and discards") {
    Overlay o;
    {
        TestBed bed(open_disk(o.path));
        bed.start();
        Request first = offer(bed, blk::kTypeIn, 3, {}, {1000, 24, 8192});
        CHECK(run(bed, first) == blk::kStatusOk);
        CHECK(data_of(bed, first) == o.base.read(3 * kSector, 9216));

        const Bytes a = q::testing::patterned(3 * kCluster / 2, 9);  // across a cluster boundary
        CHECK(run(bed, blk::kTypeOut, 100,
                  {Bytes(a.begin(), a.begin() + 7000), Bytes(a.begin() + 7000, a.end())}) == blk::kStatusOk);
        o.model.write(100 * kSector, a);
        CHECK(run(bed, blk::kTypeFlush, 0) == blk::kStatusOk);
        Request back =
            offer(bed, blk::kTypeIn, 90, {}, {static_cast<std::uint32_t>(a.size() + 20 * kSector)});
        UsedElem used{};
        CHECK(run(bed, back, &used) == blk::kStatusOk);
        CHECK(used.len == a.size() + 20 * kSector + 1);
        CHECK(data_of(bed, back) == Bytes(o.model.bytes.begin() + 90 * kSector,
                                          o.model.bytes.begin() + 90 * kSector + a.size() + 20 * kSector));

        CHECK(run(bed, blk::kTypeWriteZeroes, 0, {range(1000, 300, blk::kFlagUnmap)}) == blk::kStatusOk);
        o.model.zero(1000 * kSector, 300 * kSector);
        CHECK(run(bed, blk::kTypeWriteZeroes, 0, {range(2000, 7)}) == blk::kStatusOk);
        o.model.zero(2000 * kSector, 7 * kSector);
        CHECK(run(bed, blk::kTypeDiscard, 0, {range(4096, 256)}) == blk::kStatusOk);  // two whole clusters
        o.model.zero(4096 * kSector, 256 * kSector);
        CHECK(run(bed, blk::kTypeOut, 8191, {Bytes(1024, 1)}) == blk::kStatusIoErr);  // past the end
        CHECK(run(bed, blk::kTypeFlush, 0) == blk::kStatusOk);
    }
    CHECK(o.read_back(0, o.model.bytes.size()) == o.model.bytes);
    CHECK(o.base.read(100 * kSector, 4096) == expected_bytes(100 * kSector, 4096));  // the base is untouched
    o.check_with_qemu_img();
}

TEST_CASE("contiguous qcow2 ranges go to io_uring, the rest is served at once") {
    Overlay o;
    TestBed bed(open_disk(o.path));
    bed.start();
    auto submits = [&] { return disk_of(bed).counters().submits; };
    // The base through the overlay: one transfer from the raw file.
    std::uint64_t before = submits();
    Request base = offer(bed, blk::kTypeIn, 8, {}, {4096, 4096});
    CHECK(run(bed, base) == blk::kStatusOk);
    CHECK(data_of(bed, base) == o.base.read(8 * kSector, 8192));
    CHECK(submits() == before + 1);
    // A first write allocates: served by the library, no submission.
    const Bytes a(kCluster, 0x61);
    before = submits();
    CHECK(run(bed, blk::kTypeOut, 0, {a}) == blk::kStatusOk);
    CHECK(submits() == before);
    // Rewriting and reading the owned cluster: in place, through the ring.
    const Bytes b(4096, 0x62);
    CHECK(run(bed, blk::kTypeOut, 16, {b}) == blk::kStatusOk);
    Request back = offer(bed, blk::kTypeIn, 0, {}, {static_cast<std::uint32_t>(kCluster)});
    CHECK(run(bed, back) == blk::kStatusOk);
    CHECK(submits() == before + 2);
    Bytes expected = a;
    std::copy(b.begin(), b.end(), expected.begin() + 16 * kSector);
    CHECK(data_of(bed, back) == expected);
    // Across the owned cluster and the base: served by the library.
    Request across = offer(bed, blk::kTypeIn, kCluster / kSector - 8, {}, {8192});
    CHECK(run(bed, across) == blk::kStatusOk);
    CHECK(submits() == before + 2);
    Bytes want(expected.end() - 4096, expected.end());
    const Bytes tail = o.base.read(kCluster, 4096);
    want.insert(want.end(), tail.begin(), tail.end());
    CHECK(data_of(bed, across) == want);
}

TEST_CASE("a write in 4 KiB pages covering whole clusters allocates them as one run") {
    Overlay o;
    {
        TestBed bed(open_disk(o.path));
        bed.start();
        std::vector<Bytes> pages;
        for (std::uint64_t i = 0; i < 2 * kCluster / 4096; ++i) {
            pages.push_back(Bytes(4096, static_cast<std::uint8_t>(i + 1)));
            o.model.write(i * 4096, pages.back());
        }
        CHECK(run(bed, blk::kTypeOut, 0, pages) == blk::kStatusOk);
        auto image = q::testing::open_image(o.path, false);
        auto e = image->read_extent(0, 2 * kCluster);
        REQUIRE(e);
        CHECK(e->has_value());  // back to back: not one copy-on-write per page
        struct stat st {};
        REQUIRE(::stat(o.path.c_str(), &st) == 0);
        CHECK(st.st_size == (4 + 2 + 1) * kCluster);  // two data clusters and their L2 table
    }
    CHECK(o.read_back(0, o.model.bytes.size()) == o.model.bytes);
}

TEST_CASE("a read-only qcow2 disk reads and refuses changes") {
    Overlay o;
    TestBed bed(open_disk(o.path, true));
    bed.start();
    CHECK((bed.device_features() & blk::kFeatureRo) != 0);
    CHECK(run(bed, blk::kTypeOut, 0, {Bytes(512, 1)}) == blk::kStatusIoErr);
    Request r = offer(bed, blk::kTypeIn, 0, {}, {512});
    CHECK(run(bed, r) == blk::kStatusOk);
    CHECK(data_of(bed, r) == o.base.read(0, 512));
}

TEST_CASE("snapshot of a qcow2 disk: quiesce flushes, the restored disk reads what was written") {
    Overlay o;
    TestBed bed(open_disk(o.path));
    const Bytes before(8192, 0x3c);
    check_state_round_trip(
        bed, [&] { return open_disk(o.path); },
        [&](TestBed& b) { CHECK(run(b, blk::kTypeOut, 64, {before}) == blk::kStatusOk); },
        [&](TestBed& b) {
            Request r = offer(b, blk::kTypeIn, 64, {}, {8192});
            CHECK(run(b, r) == blk::kStatusOk);
            CHECK(data_of(b, r) == before);
        });
}

TEST_CASE("an image naming a backing file opens only with backing files allowed") {
    Overlay o;
    const Bytes before = q::testing::read_file_bytes(o.path);
    {
        auto refused = Block::open(BlockConfig{.path = o.path}, "vda");
        REQUIRE(!refused);
        CHECK(refused.error().code == q::kCodeBacking);
        CHECK(refused.error().to_string().find(o.base.path) != std::string::npos);
        CHECK(refused.error().to_string().find("backing=on") != std::string::npos);
    }
    CHECK(q::testing::read_file_bytes(o.path) == before);  // refused before any write
    CHECK(Block::open(BlockConfig{.path = o.path, .allow_backing = true}, "vda"));
}

TEST_CASE("a hostile qcow2 image fails to open with its code, naming the disk") {
    Overlay o;
    Bytes bytes = q::testing::read_file_bytes(o.path);
    q::store_be32(&bytes[36], 0);  // l1_size 0 for a 4 MiB disk
    q::testing::write_file(o.path, bytes);
    auto disk = Block::open(BlockConfig{.path = o.path, .allow_backing = true}, "vda");
    REQUIRE(!disk);
    CHECK(disk.error().code == q::kCodeCorrupt);
    CHECK(disk.error().to_string().find(o.path) != std::string::npos);
    CHECK(disk.error().to_string().find("l1_size") != std::string::npos);
}

// virtio-blk against a real image file in the temp dir, driven through the
// mmio transport by the mock driver: data round trips checked against the
// file's bytes, batching, flush, get-id, discard and write-zeroes,
// read-only disks, refused requests, hostile chains, reset with requests
// in flight, snapshots, and open failures.
#include "devices/virtio/blk/blk.hpp"

#include <doctest/doctest.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "devices/virtio/blk/blk_test_util.hpp"

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::testing;
using namespace sbx::virtio::blk_testing;

TEST_CASE("conformance") {
    TempImage image(1 << 20);
    check_conformance([&] { return open_disk(image.path); }, DeviceType::Block, 0);
}

TEST_CASE("capacity, block size, segment limit and features in the configuration space (§5.2.4)") {
    TempImage image((3 << 20) + 100);  // a partial last sector is not visible
    TestBed bed(open_disk(image.path));
    CHECK(disk_of(bed).capacity_sectors() == (3 << 20) / kSector);
    CHECK(bed.config32(offsetof(blk::ConfigSpace, capacity)) == (3 << 20) / kSector);
    CHECK(bed.config32(offsetof(blk::ConfigSpace, capacity) + 4) == 0);
    CHECK(bed.config32(offsetof(blk::ConfigSpace, seg_max)) == Block::kQueueSize - 2);
    CHECK(bed.config32(offsetof(blk::ConfigSpace, blk_size)) == 512);
    const std::uint64_t f = bed.device_features();
    CHECK((f & blk::kFeatureFlush) != 0);
    CHECK((f & blk::kFeatureBlkSize) != 0);
    CHECK((f & blk::kFeatureSegMax) != 0);
    CHECK((f & blk::kFeatureRo) == 0);
    CHECK(disk_of(bed).name() == "virtio-blk vda");
    // Probing fallocate support at open changed neither size nor bytes.
    struct stat st {};
    REQUIRE(::stat(image.path.c_str(), &st) == 0);
    CHECK(st.st_size == (3 << 20) + 100);
    CHECK(image.read(0, (3 << 20) + 100) == expected_bytes(0, (3 << 20) + 100));
}

TEST_CASE("reads return the image's bytes") {
    TempImage image(1 << 20);
    TestBed bed(open_disk(image.path));
    bed.start();
    SUBCASE("one buffer") {
        check_read_ok(bed, image, 0, 4096);
    }
    SUBCASE("buffers of uneven sizes, the total a whole number of sectors") {
        Request r = offer(bed, blk::kTypeIn, 7, {}, {1000, 24, 2048});
        CHECK(run(bed, r) == blk::kStatusOk);
        CHECK(data_of(bed, r) == expected_bytes(7 * kSector, 3072));
    }
    SUBCASE("through an indirect table") {
        Request r = offer(bed, blk::kTypeIn, 100, {}, {512, 512}, /*indirect=*/true);
        CHECK(run(bed, r) == blk::kStatusOk);
        CHECK(data_of(bed, r) == expected_bytes(100 * kSector, 1024));
    }
    SUBCASE("the last sector") {
        check_read_ok(bed, image, (1 << 20) / kSector - 1, 512);
    }
    SUBCASE("the status byte at the end of the data buffer, header split in two") {
        MockDriver& d = *bed.drivers[0];
        Bytes h = header(blk::kTypeIn, 2);
        std::vector<Bytes> readable{Bytes(h.begin(), h.begin() + 8), Bytes(h.begin() + 8, h.end())};
        std::array<std::uint32_t, 1> writable{513};
        OfferedChain chain = d.offer(readable, writable);
        bed.notify(0);
        auto used = wait_used(bed, 1);
        CHECK(used[0].len == 513);
        Bytes got = d.read(chain.writable[0].first, 513);
        CHECK(got.back() == blk::kStatusOk);
        got.pop_back();
        CHECK(got == expected_bytes(2 * kSector, 512));
    }
}

TEST_CASE("writes reach the image file") {
    TempImage image(1 << 20);
    TestBed bed(open_disk(image.path));
    bed.start();
    Bytes a(1536, 0xa5);
    Bytes b(512, 0x5a);
    CHECK(run(bed, blk::kTypeOut, 33, {a, b}) == blk::kStatusOk);
    Bytes want = a;
    want.insert(want.end(), b.begin(), b.end());
    CHECK(image.read(33 * kSector, 2048) == want);
    CHECK(image.read(32 * kSector, 512) == expected_bytes(32 * kSector, 512));  // neighbours untouched
    CHECK(image.read(37 * kSector, 512) == expected_bytes(37 * kSector, 512));
    // And reading it back through the device.
    Request r = offer(bed, blk::kTypeIn, 33, {}, {2048});
    CHECK(run(bed, r) == blk::kStatusOk);
    CHECK(data_of(bed, r) == want);
}

TEST_CASE("a short read goes on from where it stopped; the end of the file then fails it") {
    TempImage image(8 * kSector);
    TestBed bed(open_disk(image.path));
    bed.start();
    // Cut under the device (which still believes in 8 sectors): a read of
    // sectors 6 and 7 first moves 768 bytes, and the rest, asked for again
    // from the middle of the second buffer, finds the end of the file.
    REQUIRE(::truncate(image.path.c_str(), 7 * kSector + 256) == 0);
    Request r = offer(bed, blk::kTypeIn, 6, {}, {512, 512});
    UsedElem used{};
    CHECK(run(bed, r, &used) == blk::kStatusIoErr);
    CHECK(used.len == 768 + 1);
    CHECK(disk_of(bed).counters().short_transfers == 1);
    Bytes got = data_of(bed, r);
    got.resize(768);
    CHECK(got == expected_bytes(6 * kSector, 768));
    // The device carries on: a whole read before the cut still succeeds.
    check_read_ok(bed, image, 2, 1024);
}

TEST_CASE("every request of one kick goes in one submit, and the driver is interrupted once per batch") {
    TempImage image(1 << 20);
    TestBed bed(open_disk(image.path));
    bed.start();
    const auto& counters = disk_of(bed).counters();
    SUBCASE("reads: what the submit did not complete comes back in one batch, one interrupt") {
        constexpr int kReads = 32;
        std::vector<Request> reads;
        reads.reserve(kReads);
        for (int i = 0; i < kReads; ++i) {
            reads.push_back(offer(bed, blk::kTypeIn, 8ULL * i, {}, {4096}));
        }
        bed.notify(0);
        CHECK(counters.submits == 1);
        // Cached reads on ext4 complete inside the submit and are answered
        // at once; elsewhere (tmpfs) they complete later, on the eventfd.
        const int irq_at_kick = bed.irq.count;
        const std::uint64_t answered_at_kick = counters.requests;
        MESSAGE("answered inside the submit: " << answered_at_kick << " of " << kReads);
        CHECK(irq_at_kick == (answered_at_kick > 0 ? 1 : 0));
        // As Linux does once it has consumed the used ring: ask for an
        // interrupt at the next used entry (used_event, §2.7.10).
        MockDriver& d = *bed.drivers[0];
        std::size_t consumed = 0;
        while (d.take_used()) {
            ++consumed;
        }
        d.set_used_event(static_cast<std::uint16_t>(consumed));
        const Block& disk = disk_of(bed);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (disk.completions_waiting() < disk.in_flight() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        if (disk.in_flight() > 0) {
            CHECK(bed.pump(1000) == 1);
        }
        wait_used(bed, kReads - consumed);
        CHECK(counters.submits == 1);
        CHECK(counters.completion_batches <= 2);
        CHECK(bed.irq.count - irq_at_kick == (answered_at_kick < kReads ? 1 : 0));
        for (int i = 0; i < kReads; ++i) {
            CHECK(status_of(bed, reads[i]) == blk::kStatusOk);
            CHECK(data_of(bed, reads[i]) == expected_bytes(4096ULL * i, 4096));
        }
    }
    SUBCASE("reads and writes mixed") {
        constexpr std::size_t kEach = 16;
        std::vector<Request> reads;
        reads.reserve(kEach);
        for (std::size_t i = 0; i < kEach; ++i) {
            reads.push_back(offer(bed, blk::kTypeIn, 8ULL * i, {}, {4096}));
            offer(bed, blk::kTypeOut, 1024 + 8ULL * i, {Bytes(4096, static_cast<std::uint8_t>(i))});
        }
        bed.notify(0);
        wait_used(bed, 2 * kEach);
        CHECK(counters.submits == 1);
        CHECK(counters.requests == 2 * kEach);
        // Writes may complete outside the submit: still one interrupt per
        // batch of completions, never one per request.
        CHECK(bed.irq.count >= 1);
        CHECK(static_cast<std::uint64_t>(bed.irq.count) <= counters.completion_batches);
        MESSAGE("completion batches for one kick of " << 2 * kEach
                                                      << " requests: " << counters.completion_batches);
        for (std::size_t i = 0; i < kEach; ++i) {
            CHECK(data_of(bed, reads[i]) == expected_bytes(4096ULL * i, 4096));
            CHECK(image.read((1024 + 8ULL * i) * kSector, 4096) == Bytes(4096, static_cast<std::uint8_t>(i)));
        }
    }
}

TEST_CASE("requests read from the disk complete through the eventfd") {
    TempImage image(8 << 20);
    image.evict();
    TestBed bed(open_disk(image.path));
    bed.start();
    std::vector<Request> reads(32);
    for (std::size_t i = 0; i < reads.size(); ++i) {
        reads[i] = offer(bed, blk::kTypeIn, 512ULL * i, {}, {65536});
    }
    bed.notify(0);
    wait_used(bed, reads.size());
    for (std::size_t i = 0; i < reads.size(); ++i) {
        CHECK(status_of(bed, reads[i]) == blk::kStatusOk);
        CHECK(data_of(bed, reads[i]) == image.read(512ULL * i * kSector, 65536));
    }
    CHECK(disk_of(bed).counters().submits == 1);
}

TEST_CASE("flush") {
    TempImage image(1 << 20);
    TestBed bed(open_disk(image.path));
    bed.start();
    CHECK(run(bed, blk::kTypeOut, 0, {Bytes(512, 1)}) == blk::kStatusOk);
    UsedElem used{};
    Request r = offer(bed, blk::kTypeFlush, 0);
    CHECK(run(bed, r, &used) == blk::kStatusOk);
    CHECK(used.len == 1);
}

TEST_CASE("get-id answers the serial, NUL-padded to 20 bytes") {
    TempImage image(1 << 20);
    SUBCASE("the device name by default") {
        TestBed bed(open_disk(image.path));
        bed.start();
        Request r = offer(bed, blk::kTypeGetId, 0, {}, {20});
        UsedElem used{};
        CHECK(run(bed, r, &used) == blk::kStatusOk);
        CHECK(used.len == 21);
        Bytes want(20, 0);
        std::memcpy(want.data(), "vda", 3);
        CHECK(data_of(bed, r) == want);
    }
    SUBCASE("a serial of exactly 20 bytes, into a shorter buffer") {
        auto disk = Block::open(BlockConfig{.path = image.path, .serial = "sbx-0123456789abcdef"}, "vdb");
        REQUIRE(disk);
        TestBed bed(std::move(*disk));
        bed.start();
        Request r = offer(bed, blk::kTypeGetId, 0, {}, {8});
        UsedElem used{};
        CHECK(run(bed, r, &used) == blk::kStatusOk);
        CHECK(used.len == 9);
        CHECK(data_of(bed, r) == Bytes{'s', 'b', 'x', '-', '0', '1', '2', '3'});
    }
    SUBCASE("a serial over 20 bytes is refused at open") {
        auto disk = Block::open(BlockConfig{.path = image.path, .serial = "sbx-0123456789abcdef0"}, "vdb");
        REQUIRE_FALSE(disk);
        CHECK(disk.error().to_string().find(image.path) != std::string::npos);
    }
}

TEST_CASE("discard and write-zeroes") {
    TempImage image(1 << 20);
    TestBed bed(open_disk(image.path));
    const std::uint64_t f = bed.device_features();
    if ((f & blk::kFeatureDiscard) == 0 || (f & blk::kFeatureWriteZeroes) == 0) {
        MESSAGE("the file system of " << temp_dir() << " lacks fallocate PUNCH_HOLE or ZERO_RANGE: discard "
                                      << ((f & blk::kFeatureDiscard) != 0) << ", write-zeroes "
                                      << ((f & blk::kFeatureWriteZeroes) != 0));
    }
    if ((f & blk::kFeatureDiscard) != 0) {
        CHECK(bed.config32(offsetof(blk::ConfigSpace, max_discard_sectors)) == blk::kMaxRangeSectors);
        CHECK(bed.config32(offsetof(blk::ConfigSpace, max_discard_seg)) == 1);
        CHECK(bed.config32(offsetof(blk::ConfigSpace, discard_sector_alignment)) >= 1);
    }
    if ((f & blk::kFeatureWriteZeroes) != 0) {
        CHECK(bed.config32(offsetof(blk::ConfigSpace, max_write_zeroes_sectors)) == blk::kMaxRangeSectors);
        CHECK(bed.config32(offsetof(blk::ConfigSpace, max_write_zeroes_seg)) == 1);
    }
    bed.start();
    const Bytes zeros(8192, 0);
    SUBCASE("discard punches a hole that reads as zeroes") {
        if ((f & blk::kFeatureDiscard) == 0) {
            return;
        }
        CHECK(run(bed, blk::kTypeDiscard, 0, {range(64, 16)}) == blk::kStatusOk);
        CHECK(image.read(64 * kSector, 8192) == zeros);
        CHECK(image.read(63 * kSector, 512) == expected_bytes(63 * kSector, 512));
        CHECK(image.read(80 * kSector, 512) == expected_bytes(80 * kSector, 512));
        // §5.2.6.2: the unmap flag on a discard, unknown flags, several segments.
        CHECK(run(bed, blk::kTypeDiscard, 0, {range(0, 8, blk::kFlagUnmap)}) == blk::kStatusUnsupp);
        CHECK(run(bed, blk::kTypeDiscard, 0, {range(0, 8, 2)}) == blk::kStatusUnsupp);
        CHECK(run(bed, blk::kTypeDiscard, 0, {range(0, 8), range(16, 8)}) == blk::kStatusUnsupp);
        CHECK(run(bed, blk::kTypeDiscard, 0, {Bytes(8, 0)}) == blk::kStatusIoErr);
        CHECK(run(bed, blk::kTypeDiscard, 0, {range(2040, 16)}) == blk::kStatusIoErr);
        CHECK(run(bed, blk::kTypeDiscard, 0, {range(0, blk::kMaxRangeSectors + 1)}) == blk::kStatusIoErr);
        CHECK(image.read(0, 512) == expected_bytes(0, 512));
    }
    SUBCASE("write-zeroes zeroes exactly its range, with or without unmap") {
        if ((f & blk::kFeatureWriteZeroes) == 0) {
            return;
        }
        CHECK(run(bed, blk::kTypeWriteZeroes, 0, {range(3, 5)}) == blk::kStatusOk);
        CHECK(image.read(3 * kSector, 5 * kSector) == Bytes(5 * kSector, 0));
        CHECK(image.read(2 * kSector, 512) == expected_bytes(2 * kSector, 512));
        CHECK(image.read(8 * kSector, 512) == expected_bytes(8 * kSector, 512));
        CHECK(run(bed, blk::kTypeWriteZeroes, 0, {range(128, 16, blk::kFlagUnmap)}) == blk::kStatusOk);
        CHECK(image.read(128 * kSector, 8192) == zeros);
        CHECK(run(bed, blk::kTypeWriteZeroes, 0, {range(0, 1, 4)}) == blk::kStatusUnsupp);
        CHECK(run(bed, blk::kTypeWriteZeroes, 0, {range(1ULL << 60, 1)}) == blk::kStatusIoErr);
    }
    SUBCASE("a driver that did not accept the feature gets UNSUPP") {
        bed.set_reg(mmio_reg::kStatus, 0);
        bed.start(bed.device_features() & ~(blk::kFeatureDiscard | blk::kFeatureWriteZeroes));
        CHECK(run(bed, blk::kTypeDiscard, 0, {range(0, 8)}) == blk::kStatusUnsupp);
        CHECK(run(bed, blk::kTypeWriteZeroes, 0, {range(0, 8)}) == blk::kStatusUnsupp);
        CHECK(image.read(0, 4096) == expected_bytes(0, 4096));
    }
}

TEST_CASE("a read-only disk refuses every change and still reads") {
    TempImage image(1 << 20);
    ::chmod(image.path.c_str(), 0444);  // O_RDONLY is all it needs (root ignores the mode anyway)
    TestBed bed(open_disk(image.path, /*read_only=*/true));
    const std::uint64_t f = bed.device_features();
    CHECK((f & blk::kFeatureRo) != 0);
    CHECK((f & blk::kFeatureDiscard) == 0);
    CHECK((f & blk::kFeatureWriteZeroes) == 0);
    bed.start();
    CHECK(run(bed, blk::kTypeOut, 0, {Bytes(512, 0xee)}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeDiscard, 0, {range(0, 8)}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeWriteZeroes, 0, {range(0, 8)}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeFlush, 0) == blk::kStatusOk);
    CHECK(image.read(0, 4096) == expected_bytes(0, 4096));
    check_read_ok(bed, image, 0, 4096);
    CHECK(disk_of(bed).counters().io_errors == 3);
}

TEST_CASE(
    "requests outside the disk, of partial sectors or of unknown type are refused, the device carries on") {
    TempImage image(1 << 20);
    const std::uint64_t capacity = (1 << 20) / kSector;
    TestBed bed(open_disk(image.path));
    bed.start();
    CHECK(run(bed, blk::kTypeIn, capacity - 1, {}, {1024}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeIn, capacity, {}, {512}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeOut, capacity, {Bytes(512, 1)}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeIn, ~0ULL / kSector + 1, {}, {512}) ==
          blk::kStatusIoErr);  // sector * 512 overflows
    CHECK(run(bed, blk::kTypeIn, ~0ULL, {}, {512}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeIn, 0, {}, {100}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeOut, 0, {Bytes(513, 1)}) == blk::kStatusIoErr);
    // Data in the wrong direction: a read with device-readable data, a
    // write with device-writable data besides the status.
    CHECK(run(bed, blk::kTypeIn, 0, {Bytes(512, 1)}, {512}) == blk::kStatusIoErr);
    CHECK(run(bed, blk::kTypeOut, 0, {Bytes(512, 1)}, {512}) == blk::kStatusIoErr);
    CHECK(run(bed, 10, 0, {}, {16}) == blk::kStatusUnsupp);       // GET_LIFETIME is not offered
    CHECK(run(bed, 14, 0, {range(0, 1)}) == blk::kStatusUnsupp);  // SECURE_ERASE neither
    CHECK(run(bed, 0xdead, 0) == blk::kStatusUnsupp);
    CHECK(image.read(0, 1 << 20) == expected_bytes(0, 1 << 20));
    CHECK_FALSE(bed.needs_reset());
    CHECK(run(bed, blk::kTypeIn, capacity, {}, {}) == blk::kStatusOk);  // empty, at the very end
    check_read_ok(bed, image, capacity - 2, 1024);
}

TEST_CASE("a chain that cannot carry an answer means NEEDS_RESET; the driver's reset recovers") {
    TempImage image(1 << 20);
    TestBed bed(open_disk(image.path));
    bed.start();
    MockDriver& d = *bed.drivers[0];
    SUBCASE("no status byte at all") {
        d.offer(std::vector<Bytes>{header(blk::kTypeIn, 0)}, {});
    }
    SUBCASE("a status buffer the device may not write") {
        d.offer(std::vector<Bytes>{header(blk::kTypeIn, 0), Bytes{0xff}}, {});
    }
    SUBCASE("a header shorter than 16 bytes") {
        d.offer(std::vector<Bytes>{Bytes(8, 0)}, std::array<std::uint32_t, 1>{1});
    }
    SUBCASE("no header at all") {
        d.offer({}, std::array<std::uint32_t, 2>{512, 1});
    }
    bed.notify(0);
    bed.pump();
    CHECK(bed.needs_reset());
    CHECK_FALSE(d.take_used());
    CHECK(image.read(0, 1 << 20) == expected_bytes(0, 1 << 20));
    bed.set_reg(mmio_reg::kStatus, 0);
    bed.start();
    check_read_ok(bed, image, 0, 4096);
}

TEST_CASE("reset outwaits the requests in flight; the disk works again after") {
    TempImage image(16 << 20);
    image.evict();
    TestBed bed(open_disk(image.path));
    bed.start();
    for (int i = 0; i < 48; ++i) {
        offer(bed, blk::kTypeIn, 512ULL * i, {}, {65536, 65536});
    }
    offer(bed, blk::kTypeFlush, 0);
    bed.notify(0);
    const unsigned in_flight = disk_of(bed).in_flight();
    MESSAGE("requests in flight at reset: " << in_flight);
    bed.set_reg(mmio_reg::kStatus, 0);
    CHECK(disk_of(bed).in_flight() == 0);
    CHECK(bed.reg(mmio_reg::kStatus) == 0);
    bed.start();
    check_read_ok(bed, image, 4096, 8192);
    CHECK(run(bed, blk::kTypeOut, 8, {Bytes(512, 9)}) == blk::kStatusOk);
    CHECK(image.read(8 * kSector, 512) == Bytes(512, 9));
}

// As in the VMM: the device thread submits (from a queue-notify eventfd),
// a vCPU thread resets; completions the kernel finishes on the device
// thread's behalf must still arrive while the vCPU holds the device lock.
TEST_CASE("a reset on a vCPU thread outwaits what the device thread submitted") {
    TempImage image(16 << 20);
    image.evict();
    TestBed bed(open_disk(image.path));
    bed.start();
    for (int i = 0; i < 48; ++i) {
        offer(bed, blk::kTypeIn, 512ULL * i, {}, {65536, 65536});
    }
    auto kick = EventFd::create();
    REQUIRE(kick);
    std::atomic<bool> notified{false};
    std::atomic<bool> quit{false};
    REQUIRE(bed.loop->add(kick->fd(), EPOLLIN, [&](std::uint32_t) {
        [[maybe_unused]] auto r = kick->consume();
        bed.transport->notify(0);
        notified = true;
    }));
    std::thread device_thread([&] {
        while (!quit) {
            [[maybe_unused]] auto r = bed.loop->run_once(10);
        }
    });
    REQUIRE(kick->signal());
    while (!notified) {
        std::this_thread::yield();
    }
    bed.set_reg(mmio_reg::kStatus, 0);
    quit = true;
    device_thread.join();
    bed.loop->remove(kick->fd());
    CHECK(disk_of(bed).in_flight() == 0);
    bed.start();
    check_read_ok(bed, image, 4096, 8192);
}

TEST_CASE("a driver reusing a head while it is in flight loses no request") {
    TempImage image(4 << 20);
    image.evict();
    TestBed bed(open_disk(image.path));
    bed.start();
    MockDriver& d = *bed.drivers[0];
    Request r = offer(bed, blk::kTypeIn, 0, {}, {65536});
    for (int i = 1; i < Block::kQueueSize; ++i) {
        d.publish(r.chain.head);  // the same chain again: more requests than slots
    }
    bed.notify(0);
    for (int i = 0; i < 40; ++i) {
        d.publish(r.chain.head);
    }
    bed.notify(0);
    auto used = wait_used(bed, Block::kQueueSize + 40);
    for (const UsedElem& u : used) {
        CHECK(u.head == r.chain.head);
    }
    CHECK(disk_of(bed).counters().requests == Block::kQueueSize + 40);
    MESSAGE("times the device stopped popping for want of a slot: " << disk_of(bed).counters().stalls);
    CHECK(data_of(bed, r) == image.read(0, 65536));
}

TEST_CASE("several disks are independent") {
    TempImage image_a(1 << 20);
    TempImage image_b(2 << 20);
    TestBed a(open_disk(image_a.path, false, "vda"));
    TestBed b(open_disk(image_b.path, false, "vdb"));
    a.start();
    b.start();
    offer(a, blk::kTypeOut, 0, {Bytes(512, 0xaa)});
    offer(b, blk::kTypeOut, 0, {Bytes(512, 0xbb)});
    a.notify(0);
    b.notify(0);
    wait_used(a, 1);
    wait_used(b, 1);
    CHECK(image_a.read(0, 512) == Bytes(512, 0xaa));
    CHECK(image_b.read(0, 512) == Bytes(512, 0xbb));
    CHECK(disk_of(b).capacity_sectors() == (2 << 20) / kSector);
    a.set_reg(mmio_reg::kStatus, 0);  // resetting one leaves the other running
    check_read_ok(b, image_b, 1, 512);
}

TEST_CASE("opening something that is not a disk image fails with one line naming it") {
    const std::string missing = temp_dir() + "/sbx-blk-test-no-such-image";
    auto disk = Block::open(BlockConfig{.path = missing}, "vda");
    REQUIRE_FALSE(disk);
    std::string message = disk.error().to_string();
    CHECK(message.find(missing) != std::string::npos);
    CHECK(message.find("vda") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    MESSAGE(message);

    for (bool read_only : {false, true}) {
        auto dir = Block::open(BlockConfig{.path = temp_dir(), .read_only = read_only}, "vda");
        REQUIRE_FALSE(dir);
        message = dir.error().to_string();
        CHECK(message.find(temp_dir()) != std::string::npos);
        CHECK(message.find('\n') == std::string::npos);
        MESSAGE(message);
    }
}

TEST_CASE("snapshot: requests in flight are answered at quiesce; the restored disk reads and writes") {
    TempImage image(16 << 20);
    image.evict();
    TestBed bed(open_disk(image.path));
    std::vector<Request> reads;
    Bytes before_snapshot(4096, 0x3c);
    check_state_round_trip(
        bed, [&] { return open_disk(image.path); },
        [&](TestBed& b) {
            CHECK(run(b, blk::kTypeOut, 100, {before_snapshot}) == blk::kStatusOk);
            for (int i = 0; i < 48; ++i) {
                reads.push_back(offer(b, blk::kTypeIn, 512ULL * i, {}, {65536}));
            }
            b.notify(0);
            MESSAGE("requests in flight at quiesce: " << disk_of(b).in_flight());
        },
        [&](TestBed& b) {
            // Answered by quiesce, before the save: in the used ring now.
            wait_used(b, reads.size());
            for (const Request& r : reads) {
                CHECK(status_of(b, r) == blk::kStatusOk);
            }
            CHECK(data_of(b, reads[5]) == image.read(512ULL * 5 * kSector, 65536));
            Request r = offer(b, blk::kTypeIn, 100, {}, {4096});
            CHECK(run(b, r) == blk::kStatusOk);
            CHECK(data_of(b, r) == before_snapshot);
            Bytes after_restore(2048, 0xc3);
            CHECK(run(b, blk::kTypeOut, 7, {after_restore}) == blk::kStatusOk);
            Request back = offer(b, blk::kTypeIn, 7, {}, {2048});
            CHECK(run(b, back) == blk::kStatusOk);
            CHECK(data_of(b, back) == after_restore);
            CHECK(image.read(7 * kSector, 2048) == after_restore);
        });
}

TEST_CASE("snapshot: corrupt states are refused") {
    TempImage image(1 << 20);
    check_state_refusals([&] { return open_disk(image.path); });
}

TEST_CASE("snapshot: a disk of another size or writability is refused") {
    TempImage image(1 << 20);
    TempImage bigger(2 << 20);
    TestBed bed(open_disk(image.path));
    bed.start();
    REQUIRE(bed.transport->quiesce());
    const auto bytes = bed.transport->save_state();
    bed.replace(open_disk(bigger.path));
    auto r = bed.transport->restore_state(bytes);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().to_string().find(bigger.path) != std::string::npos);
    CHECK(bed.reg(mmio_reg::kStatus) == 0);
    bed.replace(open_disk(image.path, true));
    CHECK_FALSE(bed.transport->restore_state(bytes).has_value());
    CHECK(bed.reg(mmio_reg::kStatus) == 0);
    bed.replace(open_disk(image.path));
    CHECK(bed.transport->restore_state(bytes).has_value());
}

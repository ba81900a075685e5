// blk::decide alone (§5.2.6): every request type, the bounds of the disk
// (including sums that would overflow), read-only disks, and the
// discard/write-zeroes segment rules (§5.2.6.2).
#include "devices/virtio/blk/blk_request.hpp"

#include <doctest/doctest.h>

#include <limits>

using namespace sbx::virtio;
using namespace sbx::virtio::blk;

namespace {

constexpr DiskShape kDisk{1024, false, kFeatureDiscard | kFeatureWriteZeroes};
constexpr DiskShape kReadOnly{1024, true, kFeatureDiscard | kFeatureWriteZeroes};

Decision of(RequestShape r, DiskShape d = kDisk) {
    return decide(r, d);
}

Decision answered(std::uint8_t status) {
    return Decision{Operation::Answer, status};
}

RequestShape zeroing(std::uint32_t type, std::uint64_t sector, std::uint32_t sectors, std::uint32_t flags = 0) {
    return RequestShape{type, 0, 0, sizeof(DiscardWriteZeroes), DiscardWriteZeroes{sector, sectors, flags}};
}

}  // namespace

TEST_CASE("reads and writes inside the disk become transfers of their data") {
    CHECK(of({kTypeIn, 7, 3072, 0}) == Decision{Operation::Read, kStatusOk, 7 * 512, 3072});
    CHECK(of({kTypeOut, 33, 0, 2048}) == Decision{Operation::Write, kStatusOk, 33 * 512, 2048});
    CHECK(of({kTypeIn, 1023, 512, 0}) == Decision{Operation::Read, kStatusOk, 1023 * 512, 512});
    CHECK(of({kTypeIn, 1024, 0, 0}) == answered(kStatusOk));  // no data: nothing to do
}

TEST_CASE("transfers outside the disk, of partial sectors or the wrong way are I/O errors") {
    CHECK(of({kTypeIn, 1024, 512, 0}) == answered(kStatusIoErr));
    CHECK(of({kTypeIn, 1023, 1024, 0}) == answered(kStatusIoErr));
    CHECK(of({kTypeIn, 0, 513, 0}) == answered(kStatusIoErr));
    CHECK(of({kTypeIn, 0, 512, 512}) == answered(kStatusIoErr));
    CHECK(of({kTypeOut, 0, 512, 512}) == answered(kStatusIoErr));
    const auto huge = std::numeric_limits<std::uint64_t>::max();
    CHECK(of({kTypeIn, huge, 512, 0}) == answered(kStatusIoErr));
    CHECK(of({kTypeIn, 1, huge - 511, 0}) == answered(kStatusIoErr));  // sector + length would wrap
}

TEST_CASE("a read-only disk refuses every change and still reads, flushes and names itself") {
    CHECK(of({kTypeOut, 0, 0, 512}, kReadOnly) == answered(kStatusIoErr));
    CHECK(of(zeroing(kTypeDiscard, 0, 8), kReadOnly) == answered(kStatusIoErr));
    CHECK(of(zeroing(kTypeWriteZeroes, 0, 8), kReadOnly) == answered(kStatusIoErr));
    CHECK(of({kTypeIn, 0, 512, 0}, kReadOnly).op == Operation::Read);
    CHECK(of({kTypeFlush, 0, 0, 0}, kReadOnly) == answered(kStatusOk));
    CHECK(of({kTypeGetId, 0, 64, 0}, kReadOnly).op == Operation::GetId);
}

TEST_CASE("flush, get-id, and types the device does not know") {
    CHECK(of({kTypeFlush, 0, 0, 0}).op == Operation::Flush);
    CHECK(of({kTypeGetId, 0, 64, 0}) == Decision{Operation::GetId, kStatusOk, 0, kIdBytes});
    CHECK(of({kTypeGetId, 0, 5, 0}) == Decision{Operation::GetId, kStatusOk, 0, 5});
    CHECK(of({2, 0, 0, 0}) == answered(kStatusUnsupp));
    CHECK(of({0xffffffff, 0, 0, 0}) == answered(kStatusUnsupp));
}

TEST_CASE("discard and write-zeroes: one segment, inside the disk, known flags") {
    CHECK(of(zeroing(kTypeDiscard, 8, 16)) == Decision{Operation::Discard, kStatusOk, 8 * 512, 16 * 512});
    CHECK(of(zeroing(kTypeWriteZeroes, 8, 16, kFlagUnmap)) ==
          Decision{Operation::WriteZeroes, kStatusOk, 8 * 512, 16 * 512, true});
    CHECK(of(zeroing(kTypeDiscard, 8, 0)) == answered(kStatusOk));
    CHECK(of(zeroing(kTypeDiscard, 1020, 8)) == answered(kStatusIoErr));
    CHECK(of(zeroing(kTypeDiscard, 0, kMaxRangeSectors + 1), DiskShape{1ULL << 40, false, kFeatureDiscard}) ==
          answered(kStatusIoErr));
    CHECK(of(zeroing(kTypeDiscard, 0, 8, kFlagUnmap)) == answered(kStatusUnsupp));  // unmap on a discard
    CHECK(of(zeroing(kTypeWriteZeroes, 0, 8, 2)) == answered(kStatusUnsupp));       // an unknown flag
    // Two segments are more than max_discard_seg; a partial one is an error.
    RequestShape two{kTypeDiscard, 0, 0, 2 * sizeof(DiscardWriteZeroes), std::nullopt};
    CHECK(of(two) == answered(kStatusUnsupp));
    CHECK(of({kTypeDiscard, 0, 0, 8, std::nullopt}) == answered(kStatusIoErr));
    CHECK(of({kTypeDiscard, 0, 0, 0, std::nullopt}) == answered(kStatusIoErr));
    CHECK(of({kTypeWriteZeroes, 0, 512, 16, DiscardWriteZeroes{0, 1, 0}}) == answered(kStatusIoErr));
    // Not negotiated: unsupported whatever the request holds.
    CHECK(of(zeroing(kTypeDiscard, 0, 8), DiskShape{1024, false, kFeatureWriteZeroes}) ==
          answered(kStatusUnsupp));
    CHECK(of(zeroing(kTypeWriteZeroes, 0, 8), DiskShape{1024, false, kFeatureDiscard}) ==
          answered(kStatusUnsupp));
}

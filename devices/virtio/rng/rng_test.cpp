// virtio-rng: random bytes in every writable buffer of each request, the
// per-chain and per-notification caps, snapshots, and the conformance
// checks.
#include "devices/virtio/rng/rng.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include "devices/virtio/virtio_test_util.hpp"

using namespace sbx;
using namespace sbx::virtio;
using namespace sbx::virtio::testing;

namespace {

std::unique_ptr<VirtioDevice> make() {
    return Rng::create();
}

bool all_zero(const std::vector<std::uint8_t>& bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; });
}

}  // namespace

TEST_CASE("conformance") {
    check_conformance(make, DeviceType::Rng, 0);
}

TEST_CASE("no features and no configuration space (§5.4.3, §5.4.4)") {
    TestBed bed(make());
    CHECK((bed.device_features() & 0xffffffffULL & ~(kFeatureIndirectDesc | kFeatureEventIdx)) == 0);
    CHECK(bed.config32(0) == 0);
}

TEST_CASE("a request is filled with random bytes across its buffers") {
    TestBed bed(make());
    bed.start();
    MockDriver& d = *bed.drivers[0];
    std::array<std::uint32_t, 2> lens{100, 28};
    auto first = d.offer({}, lens);
    std::array<std::uint32_t, 1> one{128};
    auto second = d.offer({}, one);
    bed.notify(0);
    auto used = d.take_used();
    REQUIRE(used);
    CHECK(used->head == first.head);
    CHECK(used->len == 128);
    auto a = d.read(first.writable[0].first, 100);
    auto tail = d.read(first.writable[1].first, 28);
    a.insert(a.end(), tail.begin(), tail.end());
    used = d.take_used();
    REQUIRE(used);
    CHECK(used->len == 128);
    auto b = d.read(second.writable[0].first, 128);
    CHECK_FALSE(all_zero(a));
    CHECK_FALSE(all_zero(tail));
    CHECK(a != b);
    CHECK(bed.irq.count == 1);
}

TEST_CASE("a large request gets at most kMaxBytesPerChain bytes") {
    TestBed bed(make());
    bed.start();
    MockDriver& d = *bed.drivers[0];
    std::array<std::uint32_t, 1> big{1024 * 1024};
    auto offered = d.offer({}, big);
    bed.notify(0);
    auto used = d.take_used();
    REQUIRE(used);
    CHECK(used->len == Rng::kMaxBytesPerChain);
    auto bytes = d.read(offered.writable[0].first + (Rng::kMaxBytesPerChain - 64), 64);
    CHECK_FALSE(all_zero(bytes));
    auto past = d.read(offered.writable[0].first + Rng::kMaxBytesPerChain, 64);
    CHECK(all_zero(past));  // untouched past the length reported
}

TEST_CASE("a notification's work is capped; the rest follows on the device thread") {
    TestBed bed(make());
    bed.start();
    MockDriver& d = *bed.drivers[0];
    constexpr std::size_t kChains = 2 * Rng::kMaxBytesPerEvent / Rng::kMaxBytesPerChain;
    for (std::size_t i = 0; i < kChains; ++i) {
        std::array<std::uint32_t, 1> len{Rng::kMaxBytesPerChain};
        d.offer({}, len);
    }
    bed.notify(0);
    std::size_t used = 0;
    while (d.take_used()) {
        ++used;
    }
    CHECK(used == kChains / 2);
    CHECK(bed.pump(1000) == 1);
    while (d.take_used()) {
        ++used;
    }
    CHECK(used == kChains);
}

TEST_CASE("a request with no writable buffer means NEEDS_RESET") {
    TestBed bed(make());
    bed.start();
    std::vector<std::vector<std::uint8_t>> readable = {{1, 2, 3}};
    bed.drivers[0]->offer(readable, {});
    bed.notify(0);
    CHECK(bed.needs_reset());
    CHECK_FALSE(bed.drivers[0]->take_used());
}

TEST_CASE("snapshot: work left for a later turn is done by the restored device; bytes keep arriving") {
    TestBed bed(make());
    constexpr std::size_t kChains = 20;  // 1.25 MiB: more than one notification's worth
    std::vector<OfferedChain> offered;
    std::size_t used_before = 0;
    check_state_round_trip(
        bed, make,
        [&](TestBed& b) {
            std::array<std::uint32_t, 1> len{Rng::kMaxBytesPerChain};
            for (std::size_t i = 0; i < kChains; ++i) {
                offered.push_back(b.drivers[0]->offer({}, len));
            }
            b.notify(0);  // the resume eventfd is never run: the old VM stops here
            while (b.drivers[0]->take_used()) {
                ++used_before;
            }
            CHECK(used_before == Rng::kMaxBytesPerEvent / Rng::kMaxBytesPerChain);
        },
        [&](TestBed& b) {
            std::size_t used_after = 0;
            while (auto used = b.drivers[0]->take_used()) {
                CHECK(used->head == offered[used_before + used_after].head);
                CHECK(used->len == Rng::kMaxBytesPerChain);
                ++used_after;
            }
            CHECK(used_before + used_after == kChains);
            CHECK_FALSE(all_zero(b.drivers[0]->read(offered.back().writable[0].first, 64)));
            std::array<std::uint32_t, 1> len{32};
            auto next = b.drivers[0]->offer({}, len);
            b.notify(0);
            auto used = b.drivers[0]->take_used();
            REQUIRE(used);
            CHECK(used->head == next.head);
            CHECK_FALSE(all_zero(b.drivers[0]->read(next.writable[0].first, 32)));
        });
}

TEST_CASE("snapshot: corrupt states are refused") {
    check_state_refusals(make);
}

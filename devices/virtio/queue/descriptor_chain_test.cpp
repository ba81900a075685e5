// Chain parsing against a hostile driver: every rule of §2.7.5 that the
// device relies on, one case each.
#include "devices/virtio/queue/descriptor_chain.hpp"

#include <doctest/doctest.h>

#include "devices/virtio/queue/mock_driver.hpp"

using namespace sbx;
using namespace sbx::virtio;

namespace {

struct Fixture {
    GuestMemory memory = [] {
        MemoryRegionSpec spec{GuestAddress(0), 16 << 20};
        return GuestMemory::create(std::span(&spec, 1)).value();
    }();
    testing::MockDriver driver{memory, GuestAddress(0x100000), 16};
    DescriptorTable table{&memory, driver.desc_table(), 16, true};
    DescriptorChain chain;

    Result<void> parse(std::uint16_t head) { return chain.parse(table, head); }
};

}  // namespace

TEST_CASE("a chain of readable then writable buffers") {
    Fixture f;
    f.driver.write_descriptor(0, {0x1000, 100, kDescFlagNext, 5});
    f.driver.write_descriptor(5, {0x2000, 50, kDescFlagNext | kDescFlagWrite, 2});
    f.driver.write_descriptor(2, {0x3000, 1, kDescFlagWrite, 0});
    REQUIRE(f.parse(0));
    CHECK(f.chain.head() == 0);
    REQUIRE(f.chain.readable().size() == 1);
    REQUIRE(f.chain.writable().size() == 2);
    CHECK(f.chain.readable()[0].address.value == 0x1000);
    CHECK(f.chain.readable_bytes() == 100);
    CHECK(f.chain.writable_bytes() == 51);
}

TEST_CASE("zero-length descriptors are skipped") {
    Fixture f;
    f.driver.write_descriptor(0, {0x1000, 0, kDescFlagNext, 1});
    f.driver.write_descriptor(1, {0x2000, 8, 0, 0});
    REQUIRE(f.parse(0));
    CHECK(f.chain.readable().size() == 1);
}

TEST_CASE("hostile chains are refused and leave the chain empty") {
    Fixture f;
    SUBCASE("head beyond the queue") { CHECK_FALSE(f.parse(16)); }
    SUBCASE("next beyond the queue") {
        f.driver.write_descriptor(0, {0x1000, 8, kDescFlagNext, 16});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("a loop") {
        f.driver.write_descriptor(0, {0x1000, 8, kDescFlagNext, 1});
        f.driver.write_descriptor(1, {0x1000, 8, kDescFlagNext, 0});
        auto r = f.parse(0);
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("loop") != std::string::npos);
    }
    SUBCASE("a self loop") {
        f.driver.write_descriptor(3, {0x1000, 8, kDescFlagNext, 3});
        CHECK_FALSE(f.parse(3));
    }
    SUBCASE("a buffer outside guest memory") {
        f.driver.write_descriptor(0, {(16 << 20) - 4, 8, 0, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("a buffer whose end wraps around 2^64") {
        f.driver.write_descriptor(0, {~0ULL - 2, 8, 0, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("readable after writable (§2.7.4.2)") {
        f.driver.write_descriptor(0, {0x1000, 8, kDescFlagNext | kDescFlagWrite, 1});
        f.driver.write_descriptor(1, {0x2000, 8, 0, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("indirect without the feature") {
        f.table.indirect_allowed = false;
        f.driver.write_descriptor(0, {0x1000, 16, kDescFlagIndirect, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("indirect together with NEXT") {
        f.driver.write_descriptor(0, {0x1000, 16, kDescFlagIndirect | kDescFlagNext, 1});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("indirect table length not a multiple of 16") {
        f.driver.write_descriptor(0, {0x1000, 24, kDescFlagIndirect, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("indirect table of zero length") {
        f.driver.write_descriptor(0, {0x1000, 0, kDescFlagIndirect, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("indirect table outside guest memory") {
        f.driver.write_descriptor(0, {(16 << 20) - 16, 32, kDescFlagIndirect, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("indirect table larger than the chain cap") {
        f.driver.write_descriptor(0, {0x10000, 16 * (kMaxChainDescriptors + 1), kDescFlagIndirect, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("nested indirect") {
        f.driver.write_descriptor_at(GuestAddress(0x1000), 0, {0x2000, 16, kDescFlagIndirect, 0});
        f.driver.write_descriptor(0, {0x1000, 16, kDescFlagIndirect, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("a loop inside an indirect table") {
        f.driver.write_descriptor_at(GuestAddress(0x1000), 0, {0x2000, 8, kDescFlagNext, 1});
        f.driver.write_descriptor_at(GuestAddress(0x1000), 1, {0x2000, 8, kDescFlagNext, 0});
        f.driver.write_descriptor(0, {0x1000, 32, kDescFlagIndirect, 0});
        CHECK_FALSE(f.parse(0));
    }
    SUBCASE("next outside an indirect table") {
        f.driver.write_descriptor_at(GuestAddress(0x1000), 0, {0x2000, 8, kDescFlagNext, 2});
        f.driver.write_descriptor(0, {0x1000, 32, kDescFlagIndirect, 0});
        CHECK_FALSE(f.parse(0));
    }
    CHECK(f.chain.readable().empty());
    CHECK(f.chain.writable().empty());
}

TEST_CASE("direct descriptors followed by an indirect table") {
    Fixture f;
    f.driver.write_descriptor_at(GuestAddress(0x1000), 0, {0x3000, 8, kDescFlagNext, 1});
    f.driver.write_descriptor_at(GuestAddress(0x1000), 1, {0x4000, 4, kDescFlagWrite, 0});
    f.driver.write_descriptor(0, {0x2000, 16, kDescFlagNext, 1});
    f.driver.write_descriptor(1, {0x1000, 32, kDescFlagIndirect, 0});
    REQUIRE(f.parse(0));
    CHECK(f.chain.readable_bytes() == 24);
    CHECK(f.chain.writable_bytes() == 4);
}

TEST_CASE("the longest allowed indirect chain parses") {
    Fixture f;
    const GuestAddress table(0x200000);
    for (std::uint16_t i = 0; i < kMaxChainDescriptors; ++i) {
        bool last = i + 1 == kMaxChainDescriptors;
        f.driver.write_descriptor_at(table, i, {0x1000, 1, static_cast<std::uint16_t>(last ? 0 : kDescFlagNext),
                                                static_cast<std::uint16_t>(last ? 0 : i + 1)});
    }
    f.driver.write_descriptor(0, {table.value, 16 * kMaxChainDescriptors, kDescFlagIndirect, 0});
    REQUIRE(f.parse(0));
    CHECK(f.chain.readable_bytes() == kMaxChainDescriptors);
}

#include "devices/virtio/queue/chain_io.hpp"

#include <doctest/doctest.h>

#include <numeric>

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
    Queue queue{16};
    DescriptorChain chain;

    Fixture() {
        driver.configure(queue);
        REQUIRE(queue.activate(memory, false));
        queue.set_indirect_allowed(true);
    }
    void pop() {
        auto r = queue.pop(chain);
        REQUIRE(r.has_value());
        REQUIRE(*r);
    }
};

}  // namespace

TEST_CASE("reader crosses buffer boundaries and stops at the end") {
    Fixture f;
    std::vector<std::vector<std::uint8_t>> bufs = {{1, 2, 3}, {4}, {5, 6, 7, 8}};
    f.driver.offer(bufs, {});
    f.pop();
    ChainReader reader(f.chain);
    CHECK(reader.remaining() == 8);
    auto two = reader.read_obj<std::uint16_t>();
    REQUIRE(two);
    CHECK(*two == 0x0201);
    std::array<std::uint8_t, 4> mid{};
    REQUIRE(reader.read_exact(mid));
    CHECK(mid == std::array<std::uint8_t, 4>{3, 4, 5, 6});
    std::array<std::uint8_t, 4> rest{};
    CHECK_FALSE(reader.read_exact(rest));  // only 2 left: refused, nothing consumed
    CHECK(reader.read(rest) == 2);
    CHECK(reader.remaining() == 0);
}

TEST_CASE("writer fills buffers in order and counts what it wrote") {
    Fixture f;
    std::array<std::uint32_t, 2> lens{3, 5};
    auto offered = f.driver.offer({}, lens, true);
    f.pop();
    ChainWriter writer(f.chain);
    CHECK(writer.available() == 8);
    std::vector<std::uint8_t> data(6);
    std::iota(data.begin(), data.end(), 10);
    REQUIRE(writer.write_exact(data));
    CHECK(writer.written() == 6);
    CHECK_FALSE(writer.write_obj(std::uint32_t{0}));  // 2 bytes left
    CHECK(f.driver.read(offered.writable[0].first, 3) == std::vector<std::uint8_t>{10, 11, 12});
    CHECK(f.driver.read(offered.writable[1].first, 3) == std::vector<std::uint8_t>{13, 14, 15});
}

TEST_CASE("a chain with no writable buffer cannot be written") {
    Fixture f;
    std::vector<std::vector<std::uint8_t>> bufs = {{1}};
    f.driver.offer(bufs, {});
    f.pop();
    ChainWriter writer(f.chain);
    CHECK(writer.available() == 0);
    CHECK_FALSE(writer.write_obj(std::uint8_t{1}));
}

TEST_CASE("iovecs cover guest buffers without copying") {
    Fixture f;
    std::array<std::uint32_t, 3> lens{100, 200, 300};
    f.driver.offer({}, lens);
    f.pop();
    ChainWriter writer(f.chain);
    writer.skip(50);
    std::vector<iovec> iov;
    CHECK(writer.take_iovecs(400, iov) == 400);
    REQUIRE(iov.size() == 3);
    CHECK(iov[0].iov_len == 50);
    CHECK(iov[1].iov_len == 200);
    CHECK(iov[2].iov_len == 150);
    CHECK(writer.available() == 150);
}

#include <doctest/doctest.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "vmm/memory/guest_memory.hpp"

using namespace sbx;

namespace {
GuestMemory two_regions() {
    // [0, 64K) and [64K, 128K) adjacent; [1M, 1M+4K) separate.
    std::array specs{MemoryRegionSpec{GuestAddress(0x10000), 0x10000},
                     MemoryRegionSpec{GuestAddress(0), 0x10000},
                     MemoryRegionSpec{GuestAddress(0x100000), 0x1000}};
    auto mem = GuestMemory::create(specs);
    REQUIRE(mem);
    return std::move(*mem);
}
}  // namespace

TEST_CASE("regions are sorted and sized") {
    auto mem = two_regions();
    REQUIRE(mem.regions().size() == 3);
    CHECK(mem.regions()[0].start.value == 0);
    CHECK(mem.total_size() == 0x21000);
    CHECK(mem.end() == 0x101000);
}

TEST_CASE("overlapping, empty and unaligned regions are refused") {
    std::array overlap{MemoryRegionSpec{GuestAddress(0), 0x2000},
                       MemoryRegionSpec{GuestAddress(0x1000), 0x1000}};
    CHECK_FALSE(GuestMemory::create(overlap));
    std::array empty{MemoryRegionSpec{GuestAddress(0), 0}};
    CHECK_FALSE(GuestMemory::create(empty));
    std::array unaligned{MemoryRegionSpec{GuestAddress(0x10), 0x1000}};
    CHECK_FALSE(GuestMemory::create(unaligned));
    std::array wraps{MemoryRegionSpec{GuestAddress(0xFFFFFFFFFFFFF000ULL), 0x2000}};
    CHECK_FALSE(GuestMemory::create(wraps));
    CHECK_FALSE(GuestMemory::create({}));
}

TEST_CASE("objects round-trip and bounds are enforced") {
    auto mem = two_regions();
    REQUIRE(mem.write_obj<std::uint64_t>(GuestAddress(0x100), 0x1122334455667788ULL));
    auto v = mem.read_obj<std::uint64_t>(GuestAddress(0x100));
    REQUIRE(v);
    CHECK(*v == 0x1122334455667788ULL);

    // Past the end of the last region, in the hole, and wrapping.
    CHECK_FALSE(mem.read_obj<std::uint32_t>(GuestAddress(0x100FFE)));
    CHECK_FALSE(mem.read_obj<std::uint8_t>(GuestAddress(0x20000)));
    CHECK_FALSE(mem.read_obj<std::uint8_t>(GuestAddress(0xFFFFFFFFFFFFFFFFULL)));
    CHECK_FALSE(mem.write_obj<std::uint32_t>(GuestAddress(0x1FFFE), 1U));
}

TEST_CASE("copies span adjacent regions but slices do not") {
    auto mem = two_regions();
    std::array<std::uint8_t, 8> in{1, 2, 3, 4, 5, 6, 7, 8};
    REQUIRE(mem.write(GuestAddress(0xFFFC), in));
    std::array<std::uint8_t, 8> out{};
    REQUIRE(mem.read(GuestAddress(0xFFFC), out));
    CHECK(out == in);
    CHECK(mem.contains(GuestAddress(0xFFFC), 8));
    CHECK_FALSE(mem.slice(GuestAddress(0xFFFC), 8));
    auto s = mem.slice(GuestAddress(0xFFFC), 4);
    REQUIRE(s);
    CHECK((*s)[3] == 4);
}

TEST_CASE("fill writes across regions and checks bounds") {
    auto mem = two_regions();
    REQUIRE(mem.fill(GuestAddress(0xFFF0), 0x20, 0xAB));
    CHECK(*mem.read_obj<std::uint8_t>(GuestAddress(0x1000F)) == 0xAB);
    CHECK_FALSE(mem.fill(GuestAddress(0x1FFF0), 0x20, 0));
}

TEST_CASE("huge lengths do not overflow the bounds check") {
    auto mem = two_regions();
    CHECK_FALSE(mem.contains(GuestAddress(0x10), UINT64_MAX));
    CHECK_FALSE(mem.slice(GuestAddress(0x10), UINT64_MAX));
}

TEST_CASE("a custom mapper backs each region and must map its exact size") {
    std::array specs{MemoryRegionSpec{GuestAddress(0x100000), 0x1000}, MemoryRegionSpec{GuestAddress(0), 0x2000}};
    std::vector<std::size_t> seen;
    auto mem = GuestMemory::create(specs, [&](const MemoryRegionSpec& spec, std::size_t index) {
        seen.push_back(index);
        auto region = MmapRegion::anonymous(spec.size);
        if (region) {
            region->data()[0] = static_cast<std::uint8_t>(0xa0 + index);
        }
        return GuestMemory::unbacked(std::move(region));
    });
    REQUIRE(mem);
    CHECK(seen == std::vector<std::size_t>{0, 1});  // in address order
    CHECK(*mem->read_obj<std::uint8_t>(GuestAddress(0)) == 0xa0);
    CHECK(*mem->read_obj<std::uint8_t>(GuestAddress(0x100000)) == 0xa1);
    auto wrong = GuestMemory::create(specs, [](const MemoryRegionSpec&, std::size_t) {
        return GuestMemory::unbacked(MmapRegion::anonymous(0x3000));
    });
    CHECK_FALSE(wrong);
}

TEST_CASE("a region mapped privately from a file keeps that file; anonymous ones have none") {
    std::array spec{MemoryRegionSpec{GuestAddress(0), 0x2000}};
    CHECK_FALSE(GuestMemory::create(spec)->regions()[0].file.fd);

    FILE* file = std::tmpfile();
    REQUIRE(file != nullptr);
    const int fd = ::fileno(file);
    REQUIRE(::ftruncate(fd, 0x3000) == 0);
    REQUIRE(::pwrite(fd, "template", 8, 0x1000) == 8);
    auto mem = GuestMemory::create(spec, [fd](const MemoryRegionSpec& s, std::size_t) {
        return GuestMemory::private_file(MmapRegion::private_copy(fd, s.size, 0x1000), fd, 0x1000);
    });
    std::fclose(file);  // the region holds a descriptor of its own
    REQUIRE(mem);
    const auto& region = mem->regions()[0];
    REQUIRE(region.file.fd);
    CHECK(region.file.offset == 0x1000);
    char bytes[8] = {};
    CHECK(::pread(region.file.fd.get(), bytes, 8, 0x1000) == 8);
    CHECK(std::memcmp(bytes, "template", 8) == 0);
    CHECK(std::memcmp(region.mapping.data(), "template", 8) == 0);

    auto failed = GuestMemory::create(spec, [](const MemoryRegionSpec& s, std::size_t) {
        return GuestMemory::private_file(MmapRegion::private_copy(-1, s.size, 0), -1, 0);
    });
    CHECK_FALSE(failed);
}

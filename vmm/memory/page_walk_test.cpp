#include <doctest/doctest.h>

#include <array>

#include "vmm/memory/page_walk.hpp"

using namespace sbx;

namespace {

constexpr std::uint64_t P = 1, RW = 2, US = 4, PS = 1 << 7, NX = 1ULL << 63;

// 1 MiB of guest memory; the tables at 0x1000 (PML4), 0x2000 (PDPT),
// 0x3000 (PD), 0x4000 (PT).
struct Tables {
    GuestMemory mem = [] {
        std::array specs{MemoryRegionSpec{GuestAddress(0), 0x100000}};
        auto m = GuestMemory::create(specs);
        REQUIRE(m);
        return std::move(*m);
    }();
    void set(std::uint64_t table, std::uint64_t index, std::uint64_t entry) {
        REQUIRE(mem.write_obj(GuestAddress(table + index * 8), entry));
    }
};

// The kernel's module space: PML4 511, PDPT 511, PD 2, PT 0x11.
constexpr std::uint64_t kModule = 0xffffffffc0411208ULL;

}  // namespace

TEST_CASE("a 4 KiB kernel page maps through four levels") {
    Tables t;
    t.set(0x1000, 511, 0x2000 | P | RW);
    t.set(0x2000, 511, 0x3000 | P | RW);
    t.set(0x3000, 2, 0x4000 | P | RW);
    t.set(0x4000, 0x11, 0x9000 | P);
    auto w = walk_long_mode(t.mem, 0x1000, false, kModule);
    REQUIRE(w);
    CHECK(w->present);
    CHECK(w->entries.size() == 4);
    CHECK(w->physical == 0x9208);
    CHECK(w->page_size == 0x1000);
    CHECK_FALSE(w->writable);  // the leaf is read-only
    CHECK_FALSE(w->user);
    CHECK(w->executable);
}

TEST_CASE("a missing entry stops the walk at its level") {
    Tables t;
    t.set(0x1000, 511, 0x2000 | P | RW);
    t.set(0x2000, 511, 0x3000 | P | RW);
    auto w = walk_long_mode(t.mem, 0x1000, false, kModule);
    REQUIRE(w);
    CHECK_FALSE(w->present);
    CHECK(w->entries.size() == 3);
    CHECK(w->entries.back() == 0);
    CHECK_FALSE(w->executable);
}

TEST_CASE("a 2 MiB page, NX above it, and the CR3 low bits") {
    Tables t;
    t.set(0x1000, 0, 0x2000 | P | RW | US);
    t.set(0x2000, 1, 0x3000 | P | RW | US | NX);
    t.set(0x3000, 3, 0x600000 | P | RW | US | PS);
    const std::uint64_t va = (1ULL << 30) + (3ULL << 21) + 0x12345;
    auto w = walk_long_mode(t.mem, 0x1000 | 0x18 /* PWT, PCD */, false, va);
    REQUIRE(w);
    CHECK(w->present);
    CHECK(w->page_size == 2ULL << 20);
    CHECK(w->physical == 0x612345);
    CHECK(w->writable);
    CHECK(w->user);
    CHECK_FALSE(w->executable);
}

TEST_CASE("five levels with LA57, and a table outside memory is an error") {
    Tables t;
    t.set(0x1000, 0, 0x2000 | P);
    t.set(0x2000, 0, 0x3000 | P);
    t.set(0x3000, 0, 0x4000 | P | PS);  // a 1 GiB page
    auto w = walk_long_mode(t.mem, 0x1000, true, 0x1234);
    REQUIRE(w);
    CHECK(w->present);
    CHECK(w->entries.size() == 3);
    CHECK(w->page_size == 1ULL << 30);
    t.set(0x4000, 0, 0x40000000 | P);  // a PDPT far past the end
    t.set(0x1000, 0, 0x4000 | P);
    CHECK_FALSE(walk_long_mode(t.mem, 0x1000, false, 0x1234));
}

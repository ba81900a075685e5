#include <doctest/doctest.h>

#include <array>

#include "vmm/boot/page_tables.hpp"
#include "vmm/boot/test_images.hpp"

using namespace sbx;
using namespace sbx::boot;
using namespace sbx::boot::testing;

namespace {
std::uint64_t entry(const GuestMemory& mem, GuestAddress table, std::size_t index) {
    return mem.read_obj<std::uint64_t>(table + index * 8).value();
}
}  // namespace

TEST_CASE("boot page tables identity-map the first GiB with 2 MiB pages") {
    auto mem = make_guest_memory(64 * kMiB);
    REQUIRE(mem.fill(kPml4Addr, 3 * kPageSize, 0xff));  // stale entries must be cleared
    REQUIRE(write_boot_page_tables(mem));

    CHECK(entry(mem, kPml4Addr, 0) == (0xa000 | 0x3));
    CHECK(entry(mem, kPdptAddr, 0) == (0xb000 | 0x3));
    for (std::size_t i = 1; i < 512; ++i) {
        REQUIRE(entry(mem, kPml4Addr, i) == 0);
        REQUIRE(entry(mem, kPdptAddr, i) == 0);
    }
    for (std::size_t i = 0; i < 512; ++i) {
        REQUIRE(entry(mem, kPdAddr, i) == ((i << 21) | 0x83));
    }
    // The last 2 MiB page ends exactly at 1 GiB.
    CHECK((entry(mem, kPdAddr, 511) & ~0xfffULL) + kLargePageSize == kIdentityMapSize);
}

TEST_CASE("the boot GDT and an empty IDT are written") {
    auto mem = make_guest_memory(64 * kMiB);
    REQUIRE(mem.fill(kIdtAddr, 8, 0xff));
    REQUIRE(write_boot_gdt(mem));
    auto gdt = mem.read_obj<std::array<std::uint64_t, 4>>(kGdtAddr).value();
    CHECK(gdt == x86::kBootGdt);
    CHECK(mem.read_obj<std::uint64_t>(kIdtAddr).value() == 0);
    CHECK(kGdtLimit == 31);
    CHECK(kIdtLimit == 7);
}

TEST_CASE("page tables and GDT need low memory") {
    std::array specs{MemoryRegionSpec{GuestAddress(0x100000), 0x100000}};
    auto mem = GuestMemory::create(specs);
    REQUIRE(mem);
    CHECK_FALSE(write_boot_page_tables(*mem));
    CHECK_FALSE(write_boot_gdt(*mem));
}

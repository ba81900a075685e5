#include <doctest/doctest.h>

#include <array>
#include <string>
#include <vector>

#include "vmm/boot/initrd.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/boot/test_images.hpp"

using namespace sbx;
using namespace sbx::boot;
using namespace sbx::boot::testing;

namespace {

LoadedKernel kernel_ending_at(std::uint64_t end) {
    LoadedKernel kernel;
    kernel.kind = LoadedKernel::Elf;
    kernel.entry = GuestAddress(0x1000000);
    kernel.end = GuestAddress(end);
    kernel.reserved_end = GuestAddress(end);
    kernel.initrd_addr_max = 0x37ffffff;
    return kernel;
}

}  // namespace

TEST_CASE("the initrd goes page-aligned at the top of RAM") {
    auto mem = make_guest_memory(128 * kMiB);
    std::vector<std::uint8_t> data(10000, 0x5a);
    auto placed = load_initrd(mem, data, kernel_ending_at(0x2000000), 0x37ffffff);
    REQUIRE_MESSAGE(placed, error_text(placed));
    CHECK(placed->size == data.size());
    CHECK(placed->addr.value % kPageSize == 0);
    CHECK(placed->addr.value == (128 * kMiB - data.size()) / kPageSize * kPageSize);
    CHECK(placed->addr.value + placed->size <= 128 * kMiB);
    std::vector<std::uint8_t> back(data.size());
    REQUIRE(mem.read(placed->addr, back));
    CHECK(back == data);
}

TEST_CASE("the initrd stays at or below initrd_addr_max") {
    auto mem = make_guest_memory(256 * kMiB);
    std::vector<std::uint8_t> data(0x20000, 1);
    // boot.rst: a 128 KiB ramdisk with initrd_addr_max 0x37ffffff may start at 0x37fe0000.
    auto mem_big = make_guest_memory(1 * kGiB);
    auto placed = load_initrd(mem_big, data, kernel_ending_at(0x2000000), 0x37ffffff);
    REQUIRE(placed);
    CHECK(placed->addr.value == 0x37fe0000);

    placed = load_initrd(mem, data, kernel_ending_at(0x2000000), 0x4000000 - 1);
    REQUIRE(placed);
    CHECK(placed->addr.value == 0x4000000 - 0x20000);
}

TEST_CASE("the initrd stays below the MMIO gap even with RAM above 4 GiB") {
    auto mem = make_guest_memory(5 * kGiB);
    std::vector<std::uint8_t> data(3 * kPageSize, 2);
    auto placed = load_initrd(mem, data, kernel_ending_at(0x2000000), 0xffffffff);
    REQUIRE(placed);
    CHECK(placed->addr.value == kMmioGapStart - data.size());
}

TEST_CASE("the initrd is never placed below the kernel's reserved end") {
    auto mem = make_guest_memory(64 * kMiB);
    LoadedKernel kernel = kernel_ending_at(0x1400000);
    kernel.reserved_end = GuestAddress(0x3f00001);
    std::vector<std::uint8_t> fits(0xff000, 3);  // exactly [0x3f01000, 0x4000000)
    auto placed = load_initrd(mem, fits, kernel, 0x37ffffff);
    REQUIRE(placed);
    CHECK(placed->addr.value == 0x3f01000);

    std::vector<std::uint8_t> too_big(0xff001, 3);
    auto r = load_initrd(mem, too_big, kernel, 0x37ffffff);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "initrd (1044481 bytes) does not fit in guest memory (64 MiB)");
}

TEST_CASE("an initrd larger than guest memory, or empty, is refused") {
    auto mem = make_guest_memory(64 * kMiB);
    std::vector<std::uint8_t> huge(64 * kMiB, 0);
    auto r = load_initrd(mem, huge, kernel_ending_at(0x2000000), 0x37ffffff);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("does not fit in guest memory (64 MiB)") != std::string::npos);
    CHECK_FALSE(load_initrd(mem, {}, kernel_ending_at(0x2000000), 0x37ffffff));
    // initrd_addr_max below the kernel leaves no room at all.
    std::vector<std::uint8_t> small(16, 0);
    CHECK_FALSE(load_initrd(mem, small, kernel_ending_at(0x2000000), 0x1000000));
}

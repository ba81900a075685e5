#include <doctest/doctest.h>

#include <vector>

#include "vmm/boot/e820.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/boot/test_images.hpp"

using namespace sbx;
using namespace sbx::boot;
using namespace sbx::boot::testing;

namespace {
constexpr E820Entry ram(std::uint64_t start, std::uint64_t end) {
    return E820Entry{start, end - start, kE820Ram};
}
}  // namespace

TEST_CASE("e820 for 128 MiB: conventional memory and RAM from 1 MiB") {
    auto mem = make_guest_memory(128 * kMiB);
    CHECK(build_e820(mem) == std::vector{ram(0, 0x9fc00), ram(0x100000, 128 * kMiB)});
}

TEST_CASE("e820 for exactly 3 GiB has no high RAM") {
    auto mem = make_guest_memory(3 * kGiB);
    CHECK(build_e820(mem) == std::vector{ram(0, 0x9fc00), ram(0x100000, 3 * kGiB)});
}

TEST_CASE("e820 for 4 GiB splits around the MMIO gap") {
    auto mem = make_guest_memory(4 * kGiB);
    CHECK(build_e820(mem) ==
          std::vector{ram(0, 0x9fc00), ram(0x100000, 3 * kGiB), ram(4 * kGiB, 5 * kGiB)});
}

TEST_CASE("e820 for 16 GiB puts 13 GiB above 4 GiB") {
    auto mem = make_guest_memory(16 * kGiB);
    CHECK(build_e820(mem) ==
          std::vector{ram(0, 0x9fc00), ram(0x100000, 3 * kGiB), ram(4 * kGiB, 17 * kGiB)});
}

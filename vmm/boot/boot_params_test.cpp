#include <doctest/doctest.h>

#include <vector>

#include "vmm/boot/boot_params.hpp"
#include "vmm/boot/kernel_loader.hpp"
#include "vmm/boot/test_images.hpp"

using namespace sbx;
using namespace sbx::boot;
using namespace sbx::boot::testing;

namespace {

namespace sh = setup_header;

template <typename T>
T field(const GuestMemory& mem, std::size_t offset) {
    auto v = mem.read_obj<T>(kZeroPageAddr + offset);
    REQUIRE(v);
    return *v;
}

}  // namespace

TEST_CASE("boot_params carries the bzImage header and the loader's fields") {
    auto mem = make_guest_memory(64 * kMiB);
    REQUIRE(mem.fill(kZeroPageAddr, kZeroPageSize, 0xee));  // must be fully rewritten
    auto kernel = load_kernel(mem, make_bzimage());
    REQUIRE(kernel);
    const std::vector<E820Entry> e820 = {{0, 0x9fc00, kE820Ram},
                                         {0x100000, 63 * kMiB, kE820Ram},
                                         {0xfec00000, 0x1000, kE820Reserved}};
    BootParamsInput input;
    input.setup_header = kernel->setup_header;
    input.cmdline_addr = GuestAddress(0x123420000);  // above 4 GiB: exercises ext_cmd_line_ptr
    input.cmdline_size = 2047;
    input.initrd = InitrdPlacement{GuestAddress(0x234567000), 0x100000010};
    input.e820 = e820;
    REQUIRE(write_boot_params(mem, input));

    // Copied from the kernel's header.
    CHECK(field<std::uint32_t>(mem, sh::kHeader) == sh::kHdrSMagic);
    CHECK(field<std::uint16_t>(mem, sh::kVersion) == 0x020f);
    CHECK(field<std::uint32_t>(mem, sh::kInitSize) == kernel->init_size);
    CHECK(field<std::uint8_t>(mem, sh::kSetupSects) == 4);
    // Written by the loader.
    CHECK(field<std::uint8_t>(mem, sh::kTypeOfLoader) == 0xff);
    CHECK(field<std::uint8_t>(mem, sh::kLoadflags) == (sh::kLoadedHigh | sh::kCanUseHeap));
    CHECK(field<std::uint16_t>(mem, sh::kHeapEndPtr) == 0xfe00);
    CHECK(field<std::uint32_t>(mem, sh::kCmdLinePtr) == 0x23420000);
    CHECK(field<std::uint32_t>(mem, 0x0c8) == 0x1);  // ext_cmd_line_ptr
    CHECK(field<std::uint32_t>(mem, sh::kCmdlineSize) == 2047);
    CHECK(field<std::uint32_t>(mem, sh::kRamdiskImage) == 0x34567000);
    CHECK(field<std::uint32_t>(mem, 0x0c0) == 0x2);  // ext_ramdisk_image
    CHECK(field<std::uint32_t>(mem, sh::kRamdiskSize) == 0x10);
    CHECK(field<std::uint32_t>(mem, 0x0c4) == 0x1);  // ext_ramdisk_size
    // e820_entries at 0x1e8, e820_table at 0x2d0, 20 bytes per entry.
    CHECK(field<std::uint8_t>(mem, 0x1e8) == 3);
    for (std::size_t i = 0; i < e820.size(); ++i) {
        CHECK(field<std::uint64_t>(mem, 0x2d0 + i * 20) == e820[i].addr);
        CHECK(field<std::uint64_t>(mem, 0x2d0 + i * 20 + 8) == e820[i].size);
        CHECK(field<std::uint32_t>(mem, 0x2d0 + i * 20 + 16) == e820[i].type);
    }
    // Everything else is zero: before the header, past it, past the table.
    CHECK(field<std::uint64_t>(mem, 0) == 0);
    CHECK(field<std::uint8_t>(mem, 0x1ef) == 0);  // sentinel
    CHECK(field<std::uint8_t>(mem, 0x26c) == 0);
    CHECK(field<std::uint64_t>(mem, 0x2d0 + 3 * 20) == 0);
    CHECK(field<std::uint64_t>(mem, 0xff8) == 0);
}

TEST_CASE("an ELF kernel gets a synthesized header and no initrd fields") {
    auto mem = make_guest_memory(64 * kMiB);
    BootParamsInput input;
    input.cmdline_size = 2047;
    REQUIRE(write_boot_params(mem, input));
    CHECK(field<std::uint32_t>(mem, sh::kHeader) == sh::kHdrSMagic);
    CHECK(field<std::uint16_t>(mem, sh::kBootFlag) == 0xaa55);
    CHECK(field<std::uint16_t>(mem, sh::kVersion) == 0x020c);
    CHECK(field<std::uint32_t>(mem, sh::kKernelAlignment) == 0x1000000);
    CHECK(field<std::uint8_t>(mem, sh::kTypeOfLoader) == 0xff);
    CHECK(field<std::uint8_t>(mem, sh::kLoadflags) == sh::kCanUseHeap);
    CHECK(field<std::uint32_t>(mem, sh::kCmdLinePtr) == kCmdlineAddr.value);
    CHECK(field<std::uint32_t>(mem, 0x0c8) == 0);
    CHECK(field<std::uint32_t>(mem, sh::kRamdiskImage) == 0);
    CHECK(field<std::uint32_t>(mem, sh::kRamdiskSize) == 0);
    CHECK(field<std::uint8_t>(mem, 0x1e8) == 0);
}

TEST_CASE("write_boot_params refuses oversized inputs") {
    auto mem = make_guest_memory(64 * kMiB);
    std::vector<E820Entry> e820(129, E820Entry{0, 0x1000, kE820Ram});
    BootParamsInput input;
    input.e820 = e820;
    CHECK_FALSE(write_boot_params(mem, input));

    std::vector<std::uint8_t> header(0x290 - 0x1f1 + 1, 0);
    BootParamsInput long_header;
    long_header.setup_header = header;
    CHECK_FALSE(write_boot_params(mem, long_header));
}

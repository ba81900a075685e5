#include <doctest/doctest.h>

#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "vmm/boot/boot_params.hpp"
#include "vmm/boot/linux_boot.hpp"
#include "vmm/boot/mptable.hpp"
#include "vmm/boot/page_tables.hpp"
#include "vmm/boot/test_images.hpp"

using namespace sbx;
using namespace sbx::boot;
using namespace sbx::boot::testing;

namespace {

namespace sh = setup_header;

std::string read_cmdline(const GuestMemory& mem) {
    std::string text;
    for (GuestAddress at = kCmdlineAddr;; at = at + 1) {
        auto c = mem.read_obj<char>(at);
        REQUIRE(c);
        if (*c == '\0') {
            return text;
        }
        text.push_back(*c);
    }
}

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("setup_linux_boot prepares a bzImage with an initrd") {
    auto mem = make_guest_memory(128 * kMiB);
    const auto kernel = make_bzimage();
    const std::vector<std::uint8_t> initrd(5000, 0x42);
    LinuxBootConfig config{kernel, initrd, "console=ttyS0 panic=1", 2};
    auto setup = setup_linux_boot(mem, config);
    REQUIRE_MESSAGE(setup, error_text(setup));

    CHECK(setup->entry.value == 0x100200);
    CHECK(setup->zero_page == kZeroPageAddr);
    CHECK(setup->stack_pointer == kBootStackPointer);
    CHECK(setup->pml4 == kPml4Addr);
    CHECK(setup->gdt == kGdtAddr);
    CHECK(setup->gdt_limit == 31);
    CHECK(setup->idt == kIdtAddr);
    CHECK(setup->idt_limit == 7);
    CHECK(setup->kernel.kind == LoadedKernel::BzImage);
    REQUIRE(setup->initrd.has_value());
    CHECK(setup->initrd->size == initrd.size());
    CHECK(setup->initrd->addr.value + setup->initrd->size <= 128 * kMiB);

    CHECK(read_cmdline(mem) == "console=ttyS0 panic=1");
    auto zp = [&](std::size_t offset) { return mem.read_obj<std::uint32_t>(kZeroPageAddr + offset).value(); };
    CHECK(zp(sh::kCmdLinePtr) == kCmdlineAddr.value);
    CHECK(zp(sh::kRamdiskImage) == setup->initrd->addr.value);
    CHECK(zp(sh::kRamdiskSize) == initrd.size());
    CHECK((zp(0x1e8) & 0xff) == 2);  // e820_entries
    CHECK(mem.read_obj<std::uint32_t>(kMpTableAddr).value() == 0x5f504d5f);  // "_MP_"
    CHECK(mem.read_obj<std::uint64_t>(kPml4Addr).value() == (kPdptAddr.value | 3));
}

TEST_CASE("setup_linux_boot prepares an ELF vmlinux without an initrd") {
    auto mem = make_guest_memory(64 * kMiB);
    const auto kernel = make_elf(0x1000000, {{0x1000000, 0x1000, 0x2000, 0x90}});
    LinuxBootConfig config{kernel, {}, "", 1};
    auto setup = setup_linux_boot(mem, config);
    REQUIRE_MESSAGE(setup, error_text(setup));
    CHECK(setup->entry.value == 0x1000000);
    CHECK_FALSE(setup->initrd.has_value());
    CHECK(read_cmdline(mem).empty());
    CHECK(mem.read_obj<std::uint32_t>(kZeroPageAddr + sh::kHeader).value() == sh::kHdrSMagic);
    // No bzImage cmdline_size: the default 2048-byte capacity applies.
    CHECK(mem.read_obj<std::uint32_t>(kZeroPageAddr + sh::kCmdlineSize).value() == 2047);
}

TEST_CASE("setup_linux_boot names the step that failed") {
    auto mem = make_guest_memory(64 * kMiB);
    const auto kernel = make_bzimage();
    const std::vector<std::uint8_t> garbage(4096, 0);

    auto bad_kernel = setup_linux_boot(mem, {garbage, {}, "", 1});
    REQUIRE_FALSE(bad_kernel);
    CHECK(starts_with(bad_kernel.error().message, "kernel: not a bzImage or ELF vmlinux"));

    const std::vector<std::uint8_t> huge(64 * kMiB, 0);
    auto bad_initrd = setup_linux_boot(mem, {kernel, huge, "", 1});
    REQUIRE_FALSE(bad_initrd);
    CHECK(starts_with(bad_initrd.error().message, "initrd: initrd (67108864 bytes) does not fit"));

    auto bad_char = setup_linux_boot(mem, {kernel, {}, "a\nb", 1});
    REQUIRE_FALSE(bad_char);
    CHECK(starts_with(bad_char.error().message, "command line: "));

    // The bzImage's cmdline_size (here 10) bounds the command line.
    FakeBzImage spec;
    spec.cmdline_size = 10;
    const auto short_cmdline = make_bzimage(spec);
    CHECK(setup_linux_boot(mem, {short_cmdline, {}, "0123456789", 1}));
    auto too_long = setup_linux_boot(mem, {short_cmdline, {}, "0123456789a", 1});
    REQUIRE_FALSE(too_long);
    CHECK(starts_with(too_long.error().message, "command line: "));

    auto no_cpus = setup_linux_boot(mem, {kernel, {}, "", 0});
    REQUIRE_FALSE(no_cpus);
    CHECK(starts_with(no_cpus.error().message, "MP table: "));
}

TEST_CASE("setup_linux_boot refuses guests below the minimum memory") {
    std::array specs{MemoryRegionSpec{GuestAddress(0), 32 * kMiB}};
    auto mem = GuestMemory::create(specs);
    REQUIRE(mem);
    auto r = setup_linux_boot(*mem, {make_bzimage(), {}, "", 1});
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("minimum") != std::string::npos);
}

TEST_CASE("a real kernel from SBX_TEST_KERNEL is set up for boot") {
    const char* path = std::getenv("SBX_TEST_KERNEL");
    if (path == nullptr || *path == '\0') {
        MESSAGE("SBX_TEST_KERNEL is not set; skipping the real-kernel boot setup test");
        return;
    }
    auto file = read_file(path, 512 * kMiB);
    REQUIRE_MESSAGE(file, error_text(file));
    auto mem = make_guest_memory(512 * kMiB);
    std::span image(reinterpret_cast<const std::uint8_t*>(file->data()), file->size());
    const std::vector<std::uint8_t> initrd(1 * kMiB, 0);
    auto setup = setup_linux_boot(mem, {image, initrd, "console=ttyS0 reboot=k panic=1", 2});
    REQUIRE_MESSAGE(setup, error_text(setup));
    REQUIRE(setup->initrd.has_value());
    CHECK(setup->initrd->addr >= setup->kernel.reserved_end);
}

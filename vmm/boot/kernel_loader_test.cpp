#include <doctest/doctest.h>

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "vmm/boot/byte_io.hpp"
#include "vmm/boot/kernel_loader.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/boot/setup_header.hpp"
#include "vmm/boot/test_images.hpp"

using namespace sbx;
using namespace sbx::boot;
using namespace sbx::boot::testing;

namespace {

namespace sh = setup_header;

// The error message of a failed load, or "" when the load succeeded.
std::string load_error(const GuestMemory& mem, const std::vector<std::uint8_t>& image) {
    auto r = load_kernel(mem, image);
    return r ? std::string() : r.error().message;
}

bool contains(const std::string& text, const char* part) {
    return text.find(part) != std::string::npos;
}

template <typename T>
void patch(std::vector<std::uint8_t>& image, std::size_t offset, T value) {
    store_le<T>(std::span<std::uint8_t>(image), offset, value);
}

// Offset of program header i's field in a make_elf() image.
std::size_t phdr_field(std::size_t i, std::size_t field_offset) {
    return kElfHeaderSize + i * kPhdrSize + field_offset;
}

}  // namespace

TEST_CASE("a bzImage loads its protected-mode part at 1 MiB") {
    auto mem = make_guest_memory(64 * kMiB);
    FakeBzImage spec;
    auto image = make_bzimage(spec);
    auto kernel = load_kernel(mem, image);
    REQUIRE_MESSAGE(kernel, error_text(kernel));
    CHECK(kernel->kind == LoadedKernel::BzImage);
    CHECK(kernel->entry.value == 0x100200);
    CHECK(kernel->end.value == 0x100000 + spec.pm_size);
    // Relocatable: runtime_start = align_up(max(1 MiB, pref_address), alignment).
    CHECK(kernel->reserved_end.value == spec.pref_address + spec.init_size);
    CHECK(kernel->protocol_version == 0x020f);
    CHECK(kernel->init_size == spec.init_size);
    CHECK(kernel->cmdline_size == 2047);
    CHECK(kernel->initrd_addr_max == 0x7fffffff);
    // The header runs from 0x1f1 to 0x202 + the jump displacement.
    REQUIRE(kernel->setup_header.size() == 0x202 + 0x6a - 0x1f1);
    CHECK(std::equal(kernel->setup_header.begin(), kernel->setup_header.end(),
                     image.begin() + 0x1f1));

    std::vector<std::uint8_t> loaded(spec.pm_size);
    REQUIRE(mem.read(GuestAddress(0x100000), loaded));
    for (std::size_t i = 0; i < loaded.size(); ++i) {
        REQUIRE(loaded[i] == bzimage_pattern(i));
    }
}

TEST_CASE("setup_sects 0 means 4") {
    auto mem = make_guest_memory(64 * kMiB);
    FakeBzImage spec;
    spec.setup_sects = 0;
    auto image = make_bzimage(spec);
    REQUIRE(image.size() == 5 * 512 + spec.pm_size);
    REQUIRE(load_kernel(mem, image));
    CHECK(mem.read_obj<std::uint8_t>(GuestAddress(0x100001)).value() == bzimage_pattern(1));
}

TEST_CASE("the decompression window follows the boot protocol's runtime_start rule") {
    auto mem = make_guest_memory(64 * kMiB);
    FakeBzImage spec;
    spec.pref_address = 0x1000001;  // rounded up to the 2 MiB alignment
    auto kernel = load_kernel(mem, make_bzimage(spec));
    REQUIRE(kernel);
    CHECK(kernel->reserved_end.value == 0x1200000 + spec.init_size);

    spec.relocatable = 0;  // runs at pref_address exactly
    spec.pref_address = 0x2000000;
    kernel = load_kernel(mem, make_bzimage(spec));
    REQUIRE(kernel);
    CHECK(kernel->reserved_end.value == 0x2000000 + spec.init_size);

    spec.init_size = 60 * kMiB;  // 32 MiB + 60 MiB > 64 MiB of RAM
    CHECK(contains(load_error(mem, make_bzimage(spec)), "decompress"));
}

TEST_CASE("malformed bzImages are refused with a clear error") {
    auto mem = make_guest_memory(64 * kMiB);
    auto with = [](auto change) {
        FakeBzImage spec;
        change(spec);
        return make_bzimage(spec);
    };

    CHECK(contains(load_error(mem, {}), "empty"));
    CHECK(contains(load_error(mem, std::vector<std::uint8_t>(100, 0x90)),
                   "not a bzImage or ELF vmlinux"));
    CHECK(contains(load_error(mem, std::vector<std::uint8_t>(8192, 0)),
                   "not a bzImage or ELF vmlinux"));

    auto truncated = make_bzimage();
    truncated.resize(0x210);
    CHECK(contains(load_error(mem, truncated), "truncated"));
    auto short_header = make_bzimage();  // header claims to end at 0x26c
    short_header.resize(0x268);
    CHECK(contains(load_error(mem, short_header), "truncated"));

    CHECK(contains(load_error(mem, with([](auto& s) { s.version = 0x0205; })), "too old"));
    CHECK(contains(load_error(mem, with([](auto& s) { s.version = 0x020b; })), "not 64-bit"));
    CHECK(contains(load_error(mem, with([](auto& s) { s.xloadflags = 0x0002; })), "not 64-bit"));
    CHECK(contains(load_error(mem, with([](auto& s) { s.loadflags = 0; })), "zImage"));
    CHECK(contains(load_error(mem, with([](auto& s) { s.jump_displacement = 0x10; })),
                   "setup header ends"));
    CHECK(contains(load_error(mem, with([](auto& s) { s.jump_displacement = 0xff; })),
                   "setup header ends"));
    CHECK(contains(load_error(mem, with([](auto& s) { s.pm_size = 0x100; })), "too small"));
    CHECK(contains(load_error(mem, with([](auto& s) { s.init_size = 0x40000000; })),
                   "identity"));

    auto bad_flag = make_bzimage();
    patch<std::uint16_t>(bad_flag, sh::kBootFlag, 0x1234);
    CHECK(contains(load_error(mem, bad_flag), "boot_flag"));

    auto bad_jump = make_bzimage();
    bad_jump[sh::kJump] = 0xe9;
    CHECK(contains(load_error(mem, bad_jump), "jump"));

    auto past_end = make_bzimage();
    past_end[sh::kSetupSects] = 200;
    CHECK(contains(load_error(mem, past_end), "past the end"));
    past_end[sh::kSetupSects] = 0xff;
    CHECK(contains(load_error(mem, past_end), "past the end"));
}

TEST_CASE("a bzImage larger than guest memory is refused") {
    std::array specs{MemoryRegionSpec{GuestAddress(0), 2 * kMiB}};
    auto mem = GuestMemory::create(specs);
    REQUIRE(mem);
    FakeBzImage spec;
    spec.pm_size = 2 * kMiB;
    CHECK(contains(load_error(*mem, make_bzimage(spec)), "does not fit"));

    spec.pm_size = 0x1000;
    spec.init_size = 2 * kMiB;  // [1 MiB, 3 MiB) is not all RAM
    CHECK(contains(load_error(*mem, make_bzimage(spec)), "init_size"));
}

TEST_CASE("an ELF vmlinux loads its PT_LOAD segments by p_paddr and zeroes bss") {
    auto mem = make_guest_memory(64 * kMiB);
    REQUIRE(mem.fill(GuestAddress(0x1000000), 0x3000, 0xff));  // stale bytes where bss goes
    auto image = make_elf(0x1000000, {{0x1000000, 0x2000, 0x3000, 0xaa},
                                      {0, 0x10, 0x10, 0, PT_NOTE},
                                      {0x1400000, 0x1000, 0x1000, 0xbb}});
    auto kernel = load_kernel(mem, image);
    REQUIRE_MESSAGE(kernel, error_text(kernel));
    CHECK(kernel->kind == LoadedKernel::Elf);
    CHECK(kernel->entry.value == 0x1000000);
    CHECK(kernel->end.value == 0x1401000);
    CHECK(kernel->reserved_end == kernel->end);
    CHECK(kernel->setup_header.empty());
    CHECK(kernel->protocol_version == 0);
    CHECK(kernel->initrd_addr_max == 0x37ffffff);

    CHECK(mem.read_obj<std::uint8_t>(GuestAddress(0x1000000)).value() == 0xaa);
    CHECK(mem.read_obj<std::uint8_t>(GuestAddress(0x1001fff)).value() == 0xaa);
    CHECK(mem.read_obj<std::uint8_t>(GuestAddress(0x1002000)).value() == 0);
    CHECK(mem.read_obj<std::uint8_t>(GuestAddress(0x1002fff)).value() == 0);
    CHECK(mem.read_obj<std::uint8_t>(GuestAddress(0x1400fff)).value() == 0xbb);
}

TEST_CASE("malformed ELF images are refused with a clear error") {
    auto mem = make_guest_memory(64 * kMiB);
    const auto good = make_elf(0x1000000, {{0x1000000, 0x1000, 0x2000, 0xaa}});
    REQUIRE(load_kernel(mem, good));
    auto changed = [&](auto change) {
        auto image = good;
        change(image);
        return load_error(mem, image);
    };

    CHECK(contains(load_error(mem, {good.begin(), good.begin() + 40}), "truncated"));
    CHECK(contains(changed([](auto& i) { i[EI_CLASS] = ELFCLASS32; }), "64-bit"));
    CHECK(contains(changed([](auto& i) { i[EI_DATA] = ELFDATA2MSB; }), "little-endian"));
    CHECK(contains(changed([](auto& i) { patch<std::uint16_t>(i, 18, EM_386); }), "EM_X86_64"));
    CHECK(contains(changed([](auto& i) { patch<std::uint16_t>(i, 16, ET_DYN); }), "ET_EXEC"));
    CHECK(contains(changed([](auto& i) { patch<std::uint16_t>(i, 54, 32); }),
                   "program header size"));
    CHECK(contains(changed([](auto& i) { patch<std::uint16_t>(i, 56, 0); }),
                   "no program headers"));
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, 32, 0x10000); }),
                   "program headers"));
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, 32, UINT64_MAX - 8); }),
                   "program headers"));
    CHECK(contains(changed([](auto& i) { patch<std::uint16_t>(i, 56, 0xffff); }),
                   "program headers"));

    // Program header fields: p_type 0, p_offset 8, p_paddr 24, p_filesz 32, p_memsz 40.
    CHECK(contains(changed([](auto& i) { patch<std::uint32_t>(i, phdr_field(0, 0), PT_NOTE); }),
                   "no loadable"));
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, phdr_field(0, 32), 0x3000); }),
                   "p_filesz"));
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, phdr_field(0, 8), 0x1000); }),
                   "past the end"));
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, phdr_field(0, 8), UINT64_MAX); }),
                   "past the end"));
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, phdr_field(0, 24), 0x7000); }),
                   "below 1 MiB"));
    CHECK(contains(changed([](auto& i) {
                       patch<std::uint64_t>(i, phdr_field(0, 24), UINT64_MAX - 0x10);
                   }),
                   "identity-mapped"));
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, phdr_field(0, 24), 0x3fff000); }),
                   "outside guest memory"));
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, 24, 0x1001800); }),
                   "entry point"));  // inside bss only
    CHECK(contains(changed([](auto& i) { patch<std::uint64_t>(i, 24, 0x500); }), "entry point"));
}

TEST_CASE("ELF segments that overlap, or lie above the identity map, are refused") {
    auto mem = make_guest_memory(2 * kGiB);
    auto overlap = make_elf(0x1000000, {{0x1000000, 0x1000, 0x2000, 1}, {0x1001000, 0x10, 0x10, 2}});
    CHECK(contains(load_error(mem, overlap), "overlap"));
    auto high = make_elf(0x1000000, {{0x1000000, 0x1000, 0x1000, 1}, {0x40000000, 0x10, 0x10, 2}});
    CHECK(contains(load_error(mem, high), "identity-mapped"));
}

TEST_CASE("nothing is written when a later ELF segment is invalid") {
    auto mem = make_guest_memory(64 * kMiB);
    auto image = make_elf(0x1000000, {{0x1000000, 0x1000, 0x1000, 0xaa}, {0x7000, 0x10, 0x10, 2}});
    CHECK_FALSE(load_kernel(mem, image));
    CHECK(mem.read_obj<std::uint8_t>(GuestAddress(0x1000000)).value() == 0);
}

// The image in a file of its own (deleted on close), for load_kernel's image_fd.
struct ImageFile {
    FILE* file = std::tmpfile();
    explicit ImageFile(const std::vector<std::uint8_t>& image) {
        REQUIRE(file != nullptr);
        REQUIRE(::pwrite(fd(), image.data(), image.size(), 0) == static_cast<ssize_t>(image.size()));
    }
    ~ImageFile() { std::fclose(file); }
    [[nodiscard]] int fd() const { return ::fileno(file); }
};

std::vector<std::uint8_t> guest_bytes(const GuestMemory& mem, std::uint64_t from, std::uint64_t to) {
    std::vector<std::uint8_t> out(to - from);
    REQUIRE(mem.read(GuestAddress(from), out));
    return out;
}

TEST_CASE("an ELF read from its file loads the same bytes as from its mapping") {
    auto image = make_elf(0x1000800, {{0x1000800, 0x3900, 0x5000, 0xaa}, {0x1400000, 0x2000, 0x2000, 0xbb}});
    for (std::size_t i = 0; i < 2; ++i) {  // a byte pattern that shows any offset mistake
        std::uint64_t offset = 0, size = 0;
        std::memcpy(&offset, image.data() + phdr_field(i, offsetof(Elf64_Phdr, p_offset)), 8);
        std::memcpy(&size, image.data() + phdr_field(i, offsetof(Elf64_Phdr, p_filesz)), 8);
        for (std::uint64_t b = 0; b < size; ++b) {
            image[offset + b] = static_cast<std::uint8_t>(b * 13 + i);
        }
    }
    const ImageFile file(image);
    auto copied = make_guest_memory(64 * kMiB);
    auto read = make_guest_memory(64 * kMiB);
    REQUIRE(read.fill(GuestAddress(0x1000000), 0x600000, 0xee));  // stale bytes
    auto by_copy = load_kernel(copied, image);
    auto by_read = load_kernel(read, image, file.fd());
    REQUIRE_MESSAGE(by_copy, error_text(by_copy));
    REQUIRE_MESSAGE(by_read, error_text(by_read));
    CHECK(by_copy->read_bytes == 0);
    CHECK(by_read->read_bytes == 0x3900 + 0x2000);
    CHECK(by_read->entry == by_copy->entry);
    CHECK(by_read->end == by_copy->end);
    CHECK(guest_bytes(read, 0x1000800, 0x1005800) == guest_bytes(copied, 0x1000800, 0x1005800));
    CHECK(guest_bytes(read, 0x1400000, 0x1402000) == guest_bytes(copied, 0x1400000, 0x1402000));

    // A file shorter than its mapping said (it shrank): the mapping's bytes.
    REQUIRE(::ftruncate(file.fd(), 0x100) == 0);
    auto short_file = make_guest_memory(64 * kMiB);
    auto from_short = load_kernel(short_file, image, file.fd());
    REQUIRE_MESSAGE(from_short, error_text(from_short));
    CHECK(from_short->read_bytes == 0);
    CHECK(guest_bytes(short_file, 0x1400000, 0x1402000) == guest_bytes(copied, 0x1400000, 0x1402000));
}

TEST_CASE("a real kernel from SBX_TEST_KERNEL loads") {
    const char* path = std::getenv("SBX_TEST_KERNEL");
    if (path == nullptr || *path == '\0') {
        MESSAGE("SBX_TEST_KERNEL is not set; skipping the real-kernel test");
        return;
    }
    auto file = read_file(path, 512 * kMiB);
    REQUIRE_MESSAGE(file, error_text(file));
    auto mem = make_guest_memory(512 * kMiB);
    std::span image(reinterpret_cast<const std::uint8_t*>(file->data()), file->size());
    auto kernel = load_kernel(mem, image);
    REQUIRE_MESSAGE(kernel, error_text(kernel));
    if (kernel->kind == LoadedKernel::BzImage) {
        CHECK(kernel->protocol_version >= 0x020c);
        CHECK(kernel->entry.value == 0x100200);
        CHECK(kernel->init_size > 0);
        CHECK(kernel->cmdline_size > 0);
    } else {
        CHECK(kernel->entry >= kKernelLoadAddr);
        CHECK(kernel->entry < kernel->end);
        // Read from the file, it loads the same as copied.
        auto fd = UniqueFd::open(path, O_RDONLY);
        REQUIRE(fd);
        auto read_mem = make_guest_memory(512 * kMiB);
        auto read = load_kernel(read_mem, image, fd->get());
        REQUIRE_MESSAGE(read, error_text(read));
        CHECK(read->read_bytes > 0);
        CHECK(guest_bytes(read_mem, kKernelLoadAddr.value, kernel->end.value) ==
              guest_bytes(mem, kKernelLoadAddr.value, kernel->end.value));
    }
    MESSAGE(fmt::format("loaded {}: entry {:#x}, end {:#x}, reserved end {:#x}", path,
                        kernel->entry.value, kernel->end.value, kernel->reserved_end.value));
}

TEST_CASE("mutated and truncated images are handled without crashing") {
    auto mem = make_guest_memory(64 * kMiB);
    const auto bzimage = make_bzimage();
    const auto elf = make_elf(0x1000000, {{0x1000000, 0x100, 0x2000, 0xaa},
                                          {0x1100000, 0x80, 0x80, 0xbb}});
    const std::array<std::uint8_t, 4> values = {0x00, 0x01, 0x80, 0xff};
    auto exercise = [&](const std::vector<std::uint8_t>& original, std::size_t first,
                        std::size_t last) {
        for (std::size_t at = first; at < last; ++at) {
            for (std::uint8_t value : values) {
                auto image = original;
                image[at] = value;
                (void)load_kernel(mem, image);  // any result is fine; no crash, no overrun
            }
        }
        for (std::size_t size = 0; size < last; ++size) {
            (void)load_kernel(mem, {original.begin(), original.begin() + static_cast<long>(size)});
        }
    };
    exercise(bzimage, 0x1f0, 0x270);
    exercise(elf, 0, kElfHeaderSize + 2 * kPhdrSize);
    CHECK(load_kernel(mem, bzimage));
    CHECK(load_kernel(mem, elf));
}

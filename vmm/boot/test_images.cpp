#include "vmm/boot/test_images.hpp"

#include <elf.h>

#include <cstring>
#include <stdexcept>

#include "vmm/boot/byte_io.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/boot/setup_header.hpp"

namespace sbx::boot::testing {

namespace sh = setup_header;

GuestMemory make_guest_memory(std::uint64_t mem_bytes) {
    auto specs = ram_regions(mem_bytes);
    auto mem = GuestMemory::create(specs);
    if (!mem) {
        throw std::runtime_error(mem.error().to_string());
    }
    return std::move(*mem);
}

std::uint8_t bzimage_pattern(std::uint64_t i) { return static_cast<std::uint8_t>(i * 7 + 3); }

std::vector<std::uint8_t> make_bzimage(const FakeBzImage& spec) {
    const std::uint64_t sects = spec.setup_sects == 0 ? 4 : spec.setup_sects;
    const std::uint64_t pm_offset = (sects + 1) * 512;
    std::vector<std::uint8_t> image(pm_offset + spec.pm_size, 0);
    if (image.size() < sh::kMaxEnd) {
        throw std::logic_error("fake bzImage is smaller than its setup header");
    }
    std::span<std::uint8_t> bytes(image);
    bytes[sh::kSetupSects] = spec.setup_sects;
    store_le<std::uint16_t>(bytes, sh::kBootFlag, sh::kBootFlagMagic);
    bytes[sh::kJump] = sh::kShortJumpOpcode;
    bytes[sh::kJump + 1] = spec.jump_displacement;
    store_le<std::uint32_t>(bytes, sh::kHeader, sh::kHdrSMagic);
    store_le<std::uint16_t>(bytes, sh::kVersion, spec.version);
    bytes[sh::kLoadflags] = spec.loadflags;
    store_le<std::uint32_t>(bytes, sh::kInitrdAddrMax, spec.initrd_addr_max);
    store_le<std::uint32_t>(bytes, sh::kKernelAlignment, spec.kernel_alignment);
    bytes[sh::kRelocatableKernel] = spec.relocatable;
    store_le<std::uint16_t>(bytes, sh::kXloadflags, spec.xloadflags);
    store_le<std::uint32_t>(bytes, sh::kCmdlineSize, spec.cmdline_size);
    store_le<std::uint64_t>(bytes, sh::kPrefAddress, spec.pref_address);
    store_le<std::uint32_t>(bytes, sh::kInitSize, spec.init_size);
    for (std::uint64_t i = 0; i < spec.pm_size; ++i) {
        image[pm_offset + i] = bzimage_pattern(i);
    }
    return image;
}

std::vector<std::uint8_t> make_elf(std::uint64_t entry, const std::vector<FakeSegment>& segments) {
    static_assert(sizeof(Elf64_Ehdr) == kElfHeaderSize && sizeof(Elf64_Phdr) == kPhdrSize);
    Elf64_Ehdr ehdr{};
    std::memcpy(ehdr.e_ident, ELFMAG, SELFMAG);
    ehdr.e_ident[EI_CLASS] = ELFCLASS64;
    ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
    ehdr.e_ident[EI_VERSION] = EV_CURRENT;
    ehdr.e_type = ET_EXEC;
    ehdr.e_machine = EM_X86_64;
    ehdr.e_version = EV_CURRENT;
    ehdr.e_entry = entry;
    ehdr.e_phoff = sizeof(Elf64_Ehdr);
    ehdr.e_ehsize = sizeof(Elf64_Ehdr);
    ehdr.e_phentsize = sizeof(Elf64_Phdr);
    ehdr.e_phnum = static_cast<Elf64_Half>(segments.size());

    std::vector<std::uint8_t> image(sizeof(Elf64_Ehdr) + segments.size() * sizeof(Elf64_Phdr));
    std::memcpy(image.data(), &ehdr, sizeof(ehdr));
    for (std::size_t i = 0; i < segments.size(); ++i) {
        const FakeSegment& s = segments[i];
        Elf64_Phdr phdr{};
        phdr.p_type = s.type;
        phdr.p_flags = PF_R | PF_X;
        phdr.p_offset = image.size();
        phdr.p_vaddr = s.paddr + 0xffffffff80000000ULL;
        phdr.p_paddr = s.paddr;
        phdr.p_filesz = s.filesz;
        phdr.p_memsz = s.memsz;
        phdr.p_align = 0x1000;
        std::memcpy(image.data() + sizeof(Elf64_Ehdr) + i * sizeof(Elf64_Phdr), &phdr,
                    sizeof(phdr));
        image.insert(image.end(), s.filesz, s.fill);
    }
    return image;
}

}  // namespace sbx::boot::testing

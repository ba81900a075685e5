#include "vmm/boot/kernel_loader.hpp"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "vmm/boot/byte_io.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/boot/setup_header.hpp"

namespace sbx::boot {

namespace {

namespace sh = setup_header;

constexpr std::uint64_t kSectorSize = 512;
// setup_sects == 0 means 4 (boot.rst, "setup_sects" note (1)).
constexpr std::uint64_t kDefaultSetupSects = 4;
// The 64-bit entry point (startup_64) is 0x200 past the protected-mode
// kernel's load address (boot.rst "64-bit Boot Protocol").
constexpr std::uint64_t kStartup64Offset = 0x200;

std::string protocol_string(std::uint16_t version) {
    return fmt::format("{}.{:02}", version >> 8, version & 0xff);
}

// Rounds value up to a multiple of alignment; false on overflow.
bool align_up(std::uint64_t value, std::uint64_t alignment, std::uint64_t& out) {
    const std::uint64_t rem = alignment > 1 ? value % alignment : 0;
    if (rem == 0) {
        out = value;
        return true;
    }
    if (value > UINT64_MAX - (alignment - rem)) {
        return false;
    }
    out = value + (alignment - rem);
    return true;
}

// Where the kernel decompresses itself (boot.rst "init_size"):
//   relocatable: align_up(max(load_address, pref_address), kernel_alignment)
//   otherwise:   pref_address
Result<std::uint64_t> runtime_start(std::span<const std::uint8_t> image, std::uint64_t load) {
    const auto pref_address = load_le<std::uint64_t>(image, sh::kPrefAddress);
    if (image[sh::kRelocatableKernel] == 0) {
        return pref_address != 0 ? pref_address : load;
    }
    std::uint64_t start = 0;
    if (!align_up(std::max(load, pref_address),
                  load_le<std::uint32_t>(image, sh::kKernelAlignment), start)) {
        return make_error("bzImage pref_address {:#x} cannot be aligned", pref_address);
    }
    return start;
}

Result<LoadedKernel> load_bzimage(const GuestMemory& mem, std::span<const std::uint8_t> image) {
    if (image.size() < sh::kMinEnd) {
        return make_error("bzImage setup header is truncated: the file has {} bytes, the header "
                          "needs {}", image.size(), sh::kMinEnd);
    }
    const auto version = load_le<std::uint16_t>(image, sh::kVersion);
    if (version < sh::kProtocol2_06) {
        return make_error("boot protocol {} is too old (need 2.06 or later)",
                          protocol_string(version));
    }
    if (load_le<std::uint16_t>(image, sh::kBootFlag) != sh::kBootFlagMagic) {
        return make_error("bzImage boot_flag is not 0xAA55");
    }
    if (image[sh::kJump] != sh::kShortJumpOpcode) {
        return make_error("bzImage has no short jump at 0x200 to size its setup header");
    }
    // End of the header: 0x202 + the jump's signed displacement.
    const auto displacement = static_cast<std::int8_t>(image[sh::kJump + 1]);
    const auto header_end = static_cast<std::size_t>(static_cast<std::int64_t>(sh::kHeader) + displacement);
    if (header_end < sh::kMinEnd || header_end > sh::kMaxEnd) {
        return make_error("bzImage setup header ends at {:#x}, outside [{:#x}, {:#x}]",
                          header_end, sh::kMinEnd, sh::kMaxEnd);
    }
    if (header_end > image.size()) {
        return make_error("bzImage setup header is truncated: it ends at {:#x}, the file at {:#x}",
                          header_end, image.size());
    }
    if ((image[sh::kLoadflags] & sh::kLoadedHigh) == 0) {
        return make_error("kernel is a zImage (LOADED_HIGH clear); only bzImage is supported");
    }
    if (version < sh::kProtocol2_12 ||
        (load_le<std::uint16_t>(image, sh::kXloadflags) & sh::kXlfKernel64) == 0) {
        return make_error("kernel is not 64-bit: XLF_KERNEL_64 is not set (boot protocol {})",
                          protocol_string(version));
    }

    std::uint64_t setup_sects = image[sh::kSetupSects];
    if (setup_sects == 0) {
        setup_sects = kDefaultSetupSects;
    }
    // The protected-mode kernel follows the boot sector and the setup code.
    const std::uint64_t pm_offset = (setup_sects + 1) * kSectorSize;
    if (pm_offset >= image.size()) {
        return make_error("setup_sects {} puts the protected-mode kernel at offset {:#x}, past "
                          "the end of the {}-byte file", setup_sects, pm_offset, image.size());
    }
    const std::uint64_t pm_size = image.size() - pm_offset;
    if (pm_size <= kStartup64Offset) {
        return make_error("protected-mode kernel ({} bytes) is too small to hold the 64-bit "
                          "entry point at +{:#x}", pm_size, kStartup64Offset);
    }
    const GuestAddress load = kKernelLoadAddr;
    if (!mem.contains(load, pm_size)) {
        return make_error("protected-mode kernel ({} bytes) does not fit in guest memory at {:#x}",
                          pm_size, load.value);
    }

    const auto init_size = load_le<std::uint32_t>(image, sh::kInitSize);
    // The protocol promises an identity map of [load, load + init_size).
    if (!range_within(load.value, init_size, kIdentityMapSize)) {
        return make_error("init_size {:#x} reaches past the {} GiB identity-mapped boot region",
                          init_size, kIdentityMapSize / kGiB);
    }
    if (!mem.contains(load, init_size)) {
        return make_error("kernel init_size ({} MiB from {:#x}) does not fit in guest memory",
                          (init_size + kMiB - 1) / kMiB, load.value);
    }
    auto start = runtime_start(image, load.value);
    if (!start) {
        return start.error();
    }
    if (!mem.contains(GuestAddress(*start), init_size)) {
        return make_error("kernel needs [{:#x}, +{} MiB) to decompress (init_size), which is not "
                          "all guest RAM", *start, (init_size + kMiB - 1) / kMiB);
    }

    if (auto r = mem.write(load, image.subspan(static_cast<std::size_t>(pm_offset))); !r) {
        return r.error();
    }

    LoadedKernel kernel;
    kernel.kind = LoadedKernel::BzImage;
    kernel.entry = load + kStartup64Offset;
    kernel.end = load + pm_size;
    kernel.reserved_end = std::max(kernel.end, GuestAddress(*start + init_size));
    kernel.setup_header.assign(image.begin() + sh::kStart,
                               image.begin() + static_cast<std::ptrdiff_t>(header_end));
    kernel.init_size = init_size;
    kernel.protocol_version = version;
    kernel.cmdline_size = load_le<std::uint32_t>(image, sh::kCmdlineSize);
    kernel.initrd_addr_max = load_le<std::uint32_t>(image, sh::kInitrdAddrMax);
    return kernel;
}

struct Segment {
    std::size_t index;  // program header number, for messages
    Elf64_Phdr phdr;
};

Result<void> check_elf_header(const Elf64_Ehdr& ehdr, std::uint64_t file_size) {
    if (ehdr.e_ident[EI_CLASS] != ELFCLASS64) {
        return make_error("ELF image is not 64-bit (ELFCLASS64)");
    }
    if (ehdr.e_ident[EI_DATA] != ELFDATA2LSB) {
        return make_error("ELF image is not little-endian");
    }
    if (ehdr.e_machine != EM_X86_64) {
        return make_error("ELF machine {} is not x86-64 (EM_X86_64)", ehdr.e_machine);
    }
    if (ehdr.e_type != ET_EXEC) {
        return make_error("ELF type {} is not an executable (ET_EXEC)", ehdr.e_type);
    }
    if (ehdr.e_phnum == 0) {
        return make_error("ELF image has no program headers");
    }
    if (ehdr.e_phentsize != sizeof(Elf64_Phdr)) {
        return make_error("ELF program header size {} is not {}", ehdr.e_phentsize,
                          sizeof(Elf64_Phdr));
    }
    if (!range_within(ehdr.e_phoff, std::uint64_t{ehdr.e_phnum} * sizeof(Elf64_Phdr), file_size)) {
        return make_error("ELF program headers ({} at offset {:#x}) run past the end of the "
                          "{}-byte file", ehdr.e_phnum, ehdr.e_phoff, file_size);
    }
    return ok();
}

Result<void> check_segment(const GuestMemory& mem, const Segment& seg, std::uint64_t file_size) {
    const Elf64_Phdr& p = seg.phdr;
    if (p.p_filesz > p.p_memsz) {
        return make_error("ELF segment {} has p_filesz {:#x} larger than p_memsz {:#x}", seg.index,
                          p.p_filesz, p.p_memsz);
    }
    if (!range_within(p.p_offset, p.p_filesz, file_size)) {
        return make_error("ELF segment {} ({:#x} bytes at offset {:#x}) runs past the end of the "
                          "{}-byte file", seg.index, p.p_filesz, p.p_offset, file_size);
    }
    if (p.p_paddr < kHimemStart) {
        return make_error("ELF segment {} at {:#x} overlaps the boot structures below 1 MiB",
                          seg.index, p.p_paddr);
    }
    if (!range_within(p.p_paddr, p.p_memsz, kIdentityMapSize)) {
        return make_error("ELF segment {} ({:#x}+{:#x}) reaches past the {} GiB identity-mapped "
                          "boot region", seg.index, p.p_paddr, p.p_memsz, kIdentityMapSize / kGiB);
    }
    if (!mem.contains(GuestAddress(p.p_paddr), p.p_memsz)) {
        return make_error("ELF segment {} ({:#x}+{:#x}) lies outside guest memory", seg.index,
                          p.p_paddr, p.p_memsz);
    }
    return ok();
}

// Writes a segment's file bytes at p_paddr. With the image's file they are
// read with pread(2) straight into guest memory: one copy out of the page
// cache, instead of first-touch faults on the image's mapping, a 4 KiB page
// (or a fault-around batch) at a time, which cost most of the load under
// nested virtualization. Returns the bytes read so. (Mapping the file's
// pages into guest memory instead, copy-on-write, was slower still: it
// trades the few 2 MiB faults of guest RAM for 4 KiB page-cache pages at
// load time and in the guest's nested page tables; docs/benchmarks.md.)
Result<std::uint64_t> place_segment(const GuestMemory& mem, std::span<const std::uint8_t> image,
                                    const Elf64_Phdr& p, int image_fd) {
    if (image_fd >= 0) {
        if (auto dest = mem.slice(GuestAddress(p.p_paddr), p.p_filesz); dest) {
            std::uint64_t done = 0;
            while (done < p.p_filesz) {
                const ssize_t n = ::pread(image_fd, dest->data() + done, static_cast<std::size_t>(p.p_filesz - done),
                                          static_cast<off_t>(p.p_offset + done));
                if (n <= 0 && !(n < 0 && errno == EINTR)) {
                    break;  // a short file or a read error: the mapping below says which
                }
                done += n > 0 ? static_cast<std::uint64_t>(n) : 0;
            }
            if (done == p.p_filesz) {
                return done;
            }
        }
    }
    auto file_part = image.subspan(static_cast<std::size_t>(p.p_offset), static_cast<std::size_t>(p.p_filesz));
    if (auto r = mem.write(GuestAddress(p.p_paddr), file_part); !r) {
        return r.error();
    }
    return std::uint64_t{0};
}

Result<LoadedKernel> load_elf(const GuestMemory& mem, std::span<const std::uint8_t> image, int image_fd) {
    if (image.size() < sizeof(Elf64_Ehdr)) {
        return make_error("ELF header is truncated: the file has {} bytes, the header needs {}",
                          image.size(), sizeof(Elf64_Ehdr));
    }
    Elf64_Ehdr ehdr;
    std::memcpy(&ehdr, image.data(), sizeof(ehdr));
    if (auto r = check_elf_header(ehdr, image.size()); !r) {
        return r.error();
    }

    // Validate every PT_LOAD segment before writing any of them.
    std::vector<Segment> segments;
    for (std::size_t i = 0; i < ehdr.e_phnum; ++i) {
        Segment seg{i, {}};
        std::memcpy(&seg.phdr, image.data() + ehdr.e_phoff + i * sizeof(Elf64_Phdr),
                    sizeof(Elf64_Phdr));
        if (seg.phdr.p_type != PT_LOAD || seg.phdr.p_memsz == 0) {
            continue;
        }
        if (auto r = check_segment(mem, seg, image.size()); !r) {
            return r.error();
        }
        segments.push_back(seg);
    }
    if (segments.empty()) {
        return make_error("ELF image has no loadable (PT_LOAD) segments");
    }
    std::sort(segments.begin(), segments.end(),
              [](const Segment& a, const Segment& b) { return a.phdr.p_paddr < b.phdr.p_paddr; });
    for (std::size_t i = 1; i < segments.size(); ++i) {
        const Elf64_Phdr& prev = segments[i - 1].phdr;
        if (segments[i].phdr.p_paddr < prev.p_paddr + prev.p_memsz) {
            return make_error("ELF segments {} and {} overlap in guest memory",
                              segments[i - 1].index, segments[i].index);
        }
    }
    const bool entry_loaded = std::any_of(segments.begin(), segments.end(), [&](const Segment& s) {
        return ehdr.e_entry >= s.phdr.p_paddr && ehdr.e_entry - s.phdr.p_paddr < s.phdr.p_filesz;
    });
    if (!entry_loaded) {
        return make_error("ELF entry point {:#x} is not inside a loaded segment", ehdr.e_entry);
    }

    std::uint64_t read_bytes = 0;
    for (const Segment& seg : segments) {
        const Elf64_Phdr& p = seg.phdr;
        const GuestAddress dest(p.p_paddr);
        auto placed = place_segment(mem, image, p, image_fd);
        if (!placed) {
            return placed.error();
        }
        read_bytes += *placed;
        // The bss: p_memsz beyond p_filesz reads as zero.
        if (auto r = mem.fill(dest + p.p_filesz, p.p_memsz - p.p_filesz, 0); !r) {
            return r.error();
        }
    }

    const Elf64_Phdr& last = segments.back().phdr;
    LoadedKernel kernel;
    kernel.kind = LoadedKernel::Elf;
    kernel.entry = GuestAddress(ehdr.e_entry);
    kernel.end = GuestAddress(last.p_paddr + last.p_memsz);
    kernel.reserved_end = kernel.end;
    kernel.initrd_addr_max = sh::kDefaultInitrdAddrMax;
    kernel.read_bytes = read_bytes;
    return kernel;
}

bool has_elf_magic(std::span<const std::uint8_t> image) {
    return image.size() >= SELFMAG && std::memcmp(image.data(), ELFMAG, SELFMAG) == 0;
}

bool has_hdrs_magic(std::span<const std::uint8_t> image) {
    return range_within(sh::kHeader, 4, image.size()) &&
           load_le<std::uint32_t>(image, sh::kHeader) == sh::kHdrSMagic;
}

}  // namespace

Result<LoadedKernel> load_kernel(const GuestMemory& mem, std::span<const std::uint8_t> image, int image_fd) {
    if (image.empty()) {
        return make_error("kernel image is empty");
    }
    if (has_elf_magic(image)) {
        return load_elf(mem, image, image_fd);
    }
    if (has_hdrs_magic(image)) {
        return load_bzimage(mem, image);
    }
    if (image.size() < sh::kHeader + 4) {
        return make_error("not a bzImage or ELF vmlinux: {} bytes is too short for a setup header",
                          image.size());
    }
    return make_error("not a bzImage or ELF vmlinux: no ELF magic and no \"HdrS\" at 0x202");
}

}  // namespace sbx::boot

// struct setup_header of the Linux x86 boot protocol
// (arch/x86/include/uapi/asm/bootparam.h; Documentation/arch/x86/boot.rst
// "The Real-Mode Kernel Header"). It sits at offset 0x1f1 both in a bzImage
// file and in struct boot_params, so the constants below are offsets in both.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sbx::boot::setup_header {

// Field layout, mirrored here only to check the offsets at compile time.
struct [[gnu::packed]] Layout {
    std::uint8_t setup_sects;
    std::uint16_t root_flags;
    std::uint32_t syssize;
    std::uint16_t ram_size;
    std::uint16_t vid_mode;
    std::uint16_t root_dev;
    std::uint16_t boot_flag;
    std::uint16_t jump;
    std::uint32_t header;
    std::uint16_t version;
    std::uint32_t realmode_swtch;
    std::uint16_t start_sys_seg;
    std::uint16_t kernel_version;
    std::uint8_t type_of_loader;
    std::uint8_t loadflags;
    std::uint16_t setup_move_size;
    std::uint32_t code32_start;
    std::uint32_t ramdisk_image;
    std::uint32_t ramdisk_size;
    std::uint32_t bootsect_kludge;
    std::uint16_t heap_end_ptr;
    std::uint8_t ext_loader_ver;
    std::uint8_t ext_loader_type;
    std::uint32_t cmd_line_ptr;
    std::uint32_t initrd_addr_max;
    std::uint32_t kernel_alignment;
    std::uint8_t relocatable_kernel;
    std::uint8_t min_alignment;
    std::uint16_t xloadflags;
    std::uint32_t cmdline_size;
    std::uint32_t hardware_subarch;
    std::uint64_t hardware_subarch_data;
    std::uint32_t payload_offset;
    std::uint32_t payload_length;
    std::uint64_t setup_data;
    std::uint64_t pref_address;
    std::uint32_t init_size;
    std::uint32_t handover_offset;
    std::uint32_t kernel_info_offset;
};

inline constexpr std::size_t kStart = 0x1f1;
// boot_params reserves [0x1f1, 0x290) for the header (_pad7 follows hdr).
inline constexpr std::size_t kMaxEnd = 0x290;

inline constexpr std::size_t kSetupSects = 0x1f1;
inline constexpr std::size_t kBootFlag = 0x1fe;
inline constexpr std::size_t kJump = 0x200;
inline constexpr std::size_t kHeader = 0x202;
inline constexpr std::size_t kVersion = 0x206;
inline constexpr std::size_t kTypeOfLoader = 0x210;
inline constexpr std::size_t kLoadflags = 0x211;
inline constexpr std::size_t kRamdiskImage = 0x218;
inline constexpr std::size_t kRamdiskSize = 0x21c;
inline constexpr std::size_t kHeapEndPtr = 0x224;
inline constexpr std::size_t kCmdLinePtr = 0x228;
inline constexpr std::size_t kInitrdAddrMax = 0x22c;
inline constexpr std::size_t kKernelAlignment = 0x230;
inline constexpr std::size_t kRelocatableKernel = 0x234;
inline constexpr std::size_t kXloadflags = 0x236;
inline constexpr std::size_t kCmdlineSize = 0x238;
inline constexpr std::size_t kPrefAddress = 0x258;
inline constexpr std::size_t kInitSize = 0x260;
// The header must reach at least this far for every field the loader reads.
inline constexpr std::size_t kMinEnd = kInitSize + 4;

#define SBX_CHECK_SETUP_FIELD(field, offset) \
    static_assert(kStart + offsetof(Layout, field) == (offset), #field)
SBX_CHECK_SETUP_FIELD(setup_sects, kSetupSects);
SBX_CHECK_SETUP_FIELD(boot_flag, kBootFlag);
SBX_CHECK_SETUP_FIELD(jump, kJump);
SBX_CHECK_SETUP_FIELD(header, kHeader);
SBX_CHECK_SETUP_FIELD(version, kVersion);
SBX_CHECK_SETUP_FIELD(type_of_loader, kTypeOfLoader);
SBX_CHECK_SETUP_FIELD(loadflags, kLoadflags);
SBX_CHECK_SETUP_FIELD(ramdisk_image, kRamdiskImage);
SBX_CHECK_SETUP_FIELD(ramdisk_size, kRamdiskSize);
SBX_CHECK_SETUP_FIELD(heap_end_ptr, kHeapEndPtr);
SBX_CHECK_SETUP_FIELD(cmd_line_ptr, kCmdLinePtr);
SBX_CHECK_SETUP_FIELD(initrd_addr_max, kInitrdAddrMax);
SBX_CHECK_SETUP_FIELD(kernel_alignment, kKernelAlignment);
SBX_CHECK_SETUP_FIELD(relocatable_kernel, kRelocatableKernel);
SBX_CHECK_SETUP_FIELD(xloadflags, kXloadflags);
SBX_CHECK_SETUP_FIELD(cmdline_size, kCmdlineSize);
SBX_CHECK_SETUP_FIELD(pref_address, kPrefAddress);
SBX_CHECK_SETUP_FIELD(init_size, kInitSize);
#undef SBX_CHECK_SETUP_FIELD
static_assert(kStart + sizeof(Layout) == 0x26c && 0x26c <= kMaxEnd);

// header: the magic "HdrS".
inline constexpr std::uint32_t kHdrSMagic = 0x53726448;
inline constexpr std::uint16_t kBootFlagMagic = 0xaa55;
// jump: a short jmp (0xeb) whose 8-bit displacement, counted from 0x202,
// marks the end of the header (boot.rst "64-bit Boot Protocol").
inline constexpr std::uint8_t kShortJumpOpcode = 0xeb;

// loadflags bits.
inline constexpr std::uint8_t kLoadedHigh = 1U << 0;
inline constexpr std::uint8_t kCanUseHeap = 1U << 7;
// xloadflags bits (protocol 2.12+).
inline constexpr std::uint16_t kXlfKernel64 = 1U << 0;
inline constexpr std::uint16_t kXlfCanBeLoadedAbove4G = 1U << 1;

// Boot protocol versions, (major << 8) | minor.
inline constexpr std::uint16_t kProtocol2_06 = 0x0206;  // cmdline_size
inline constexpr std::uint16_t kProtocol2_12 = 0x020c;  // xloadflags, ext_* fields

// type_of_loader 0xff: "undefined" loader without an assigned id.
inline constexpr std::uint8_t kLoaderUndefined = 0xff;
// initrd_addr_max before protocol 2.03 and whenever the header is absent.
inline constexpr std::uint32_t kDefaultInitrdAddrMax = 0x37ffffff;

}  // namespace sbx::boot::setup_header

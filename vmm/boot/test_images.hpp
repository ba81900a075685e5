// Synthetic kernel images and guest memory for the boot layer's unit tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot::testing {

// The error text of a failed result, "" for a successful one; safe in
// doctest's lazily evaluated *_MESSAGE arguments.
template <typename T>
std::string error_text(const Result<T>& result) {
    return result ? std::string() : result.error().to_string();
}

// Guest memory laid out by ram_regions(mem_bytes).
GuestMemory make_guest_memory(std::uint64_t mem_bytes);

// The header fields of a minimal, valid bzImage; tests change one to break it.
struct FakeBzImage {
    std::uint8_t setup_sects = 4;
    std::uint16_t version = 0x020f;
    std::uint8_t loadflags = 0x01;     // LOADED_HIGH
    std::uint16_t xloadflags = 0x0001;  // XLF_KERNEL_64
    std::uint8_t jump_displacement = 0x6a;  // header ends at 0x26c
    std::uint32_t init_size = 0x200000;
    std::uint64_t pref_address = 0x1000000;
    std::uint32_t kernel_alignment = 0x200000;
    std::uint8_t relocatable = 1;
    std::uint32_t cmdline_size = 2047;
    std::uint32_t initrd_addr_max = 0x7fffffff;
    std::uint64_t pm_size = 0x3000;  // protected-mode bytes, filled with a pattern
};

std::vector<std::uint8_t> make_bzimage(const FakeBzImage& spec = {});
// The byte the protected-mode part of make_bzimage() holds at offset i.
std::uint8_t bzimage_pattern(std::uint64_t i);

struct FakeSegment {
    std::uint64_t paddr = 0;
    std::uint64_t filesz = 0;
    std::uint64_t memsz = 0;
    std::uint8_t fill = 0xcc;
    std::uint32_t type = 1;  // PT_LOAD
};

// An ELF64 x86-64 ET_EXEC image: header, program headers, then each
// segment's file bytes in order.
std::vector<std::uint8_t> make_elf(std::uint64_t entry, const std::vector<FakeSegment>& segments);
// Offsets into make_elf() output.
inline constexpr std::size_t kElfHeaderSize = 64;
inline constexpr std::size_t kPhdrSize = 56;

}  // namespace sbx::boot::testing

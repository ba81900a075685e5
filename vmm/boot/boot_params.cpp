#include "vmm/boot/boot_params.hpp"

#include <cstring>

namespace sbx::boot {

namespace {

namespace sh = setup_header;
using zero_page::BootParams;

constexpr std::uint32_t low32(std::uint64_t v) { return static_cast<std::uint32_t>(v); }
constexpr std::uint32_t high32(std::uint64_t v) { return static_cast<std::uint32_t>(v >> 32); }

// The header fields a bzImage provides and an ELF vmlinux lacks.
void synthesize_header(sh::Layout& hdr) {
    hdr.boot_flag = sh::kBootFlagMagic;
    hdr.header = sh::kHdrSMagic;
    // 2.12: the first protocol with xloadflags and the ext_* fields filled
    // here. Non-zero also matters: x86_64_start_reservations() takes version
    // 0 to mean boot_params has not been copied yet.
    hdr.version = sh::kProtocol2_12;
    hdr.kernel_alignment = zero_page::kElfKernelAlignment;
}

}  // namespace

Result<void> write_boot_params(const GuestMemory& mem, const BootParamsInput& input) {
    constexpr std::size_t kMaxHeader = sh::kMaxEnd - sh::kStart;
    if (input.setup_header.size() > kMaxHeader) {
        return make_error("setup header of {} bytes exceeds the {} bytes boot_params reserves",
                          input.setup_header.size(), kMaxHeader);
    }
    if (input.e820.size() > zero_page::kE820MaxEntries) {
        return make_error("{} e820 entries exceed the zero page's {}", input.e820.size(),
                          zero_page::kE820MaxEntries);
    }

    BootParams params;
    std::memset(&params, 0, sizeof(params));
    auto* header_bytes = reinterpret_cast<std::uint8_t*>(&params) + sh::kStart;
    if (input.setup_header.empty()) {
        synthesize_header(params.hdr);
    } else {
        std::memcpy(header_bytes, input.setup_header.data(), input.setup_header.size());
    }

    params.hdr.type_of_loader = sh::kLoaderUndefined;
    params.hdr.loadflags = static_cast<std::uint8_t>(params.hdr.loadflags | sh::kCanUseHeap);
    params.hdr.heap_end_ptr = zero_page::kHeapEndPtr;
    params.hdr.cmd_line_ptr = low32(input.cmdline_addr.value);
    params.ext_cmd_line_ptr = high32(input.cmdline_addr.value);
    params.hdr.cmdline_size = input.cmdline_size;
    if (input.initrd) {
        params.hdr.ramdisk_image = low32(input.initrd->addr.value);
        params.ext_ramdisk_image = high32(input.initrd->addr.value);
        params.hdr.ramdisk_size = low32(input.initrd->size);
        params.ext_ramdisk_size = high32(input.initrd->size);
    }
    params.e820_entries = static_cast<std::uint8_t>(input.e820.size());
    for (std::size_t i = 0; i < input.e820.size(); ++i) {
        params.e820_table[i] = zero_page::E820Entry{input.e820[i].addr, input.e820[i].size,
                                                    input.e820[i].type};
    }
    return mem.write_obj(kZeroPageAddr, params);
}

}  // namespace sbx::boot

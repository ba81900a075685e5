// Everything needed to boot Linux through the 64-bit boot protocol, in one
// call: loads the kernel and initrd, writes the command line, zero page,
// MP table, page tables and GDT, and returns the initial vCPU state.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/result.hpp"
#include "vmm/boot/initrd.hpp"
#include "vmm/boot/kernel_loader.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot {

// Command line capacity (NUL included) for a kernel whose header does not
// give cmdline_size: the x86 COMMAND_LINE_SIZE.
inline constexpr std::uint32_t kDefaultCmdlineCapacity = 2048;

struct LinuxBootConfig {
    std::span<const std::uint8_t> kernel;
    std::span<const std::uint8_t> initrd;  // may be empty
    std::string cmdline;
    unsigned num_cpus = 1;
    int kernel_fd = -1;  // the file `kernel` maps, or -1 (load_kernel's image_fd)
};

// The vCPU entry state (set by the KVM layer): rip = entry, rsi = zero_page,
// rsp = stack_pointer, cr3 = pml4, GDTR = {gdt, gdt_limit},
// IDTR = {idt, idt_limit}.
struct BootSetup {
    GuestAddress entry;
    GuestAddress zero_page;
    GuestAddress stack_pointer;
    GuestAddress pml4;
    GuestAddress gdt;
    std::uint16_t gdt_limit = 0;
    GuestAddress idt;
    std::uint16_t idt_limit = 0;
    LoadedKernel kernel;
    std::optional<InitrdPlacement> initrd;
};

// Expects memory laid out by ram_regions() and at least kMinGuestMemory of
// it. Errors carry the step that failed ("kernel: ...", "initrd: ...",
// "command line: ...", "MP table: ...").
[[nodiscard]] Result<BootSetup> setup_linux_boot(const GuestMemory& mem,
                                                 const LinuxBootConfig& config);

}  // namespace sbx::boot

#include "vmm/boot/linux_boot.hpp"

#include <algorithm>
#include <vector>

#include "vmm/boot/boot_params.hpp"
#include "vmm/boot/cmdline.hpp"
#include "vmm/boot/e820.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/boot/mptable.hpp"
#include "vmm/boot/page_tables.hpp"

namespace sbx::boot {

namespace {

// Capacity, NUL included, of the command line the kernel accepts: its
// cmdline_size (which excludes the NUL) + 1, else COMMAND_LINE_SIZE; never
// more than the space reserved at kCmdlineAddr.
std::size_t cmdline_capacity(const LoadedKernel& kernel) {
    const std::uint64_t wanted = kernel.kind == LoadedKernel::BzImage && kernel.cmdline_size != 0
                                     ? std::uint64_t{kernel.cmdline_size} + 1
                                     : kDefaultCmdlineCapacity;
    return static_cast<std::size_t>(std::min(wanted, kCmdlineMaxSize));
}

Result<void> write_cmdline(const GuestMemory& mem, const Cmdline& cmdline) {
    const std::string& text = cmdline.str();
    // c_str() includes the terminating NUL.
    return mem.write(kCmdlineAddr, std::span(reinterpret_cast<const std::uint8_t*>(text.c_str()),
                                             text.size() + 1));
}

}  // namespace

Result<BootSetup> setup_linux_boot(const GuestMemory& mem, const LinuxBootConfig& config) {
    if (mem.total_size() < kMinGuestMemory) {
        return make_error("guest memory of {} MiB is below the {} MiB minimum",
                          mem.total_size() / kMiB, kMinGuestMemory / kMiB);
    }

    auto kernel = load_kernel(mem, config.kernel, config.kernel_fd);
    if (!kernel) {
        return kernel.error().context("kernel");
    }

    Cmdline cmdline(cmdline_capacity(*kernel));
    if (auto r = cmdline.append(config.cmdline); !r) {
        return r.error().context("command line");
    }
    if (auto r = write_cmdline(mem, cmdline); !r) {
        return r.error().context("command line");
    }

    std::optional<InitrdPlacement> initrd;
    if (!config.initrd.empty()) {
        auto placed = load_initrd(mem, config.initrd, *kernel, kernel->initrd_addr_max);
        if (!placed) {
            return placed.error().context("initrd");
        }
        initrd = *placed;
    }

    const std::vector<E820Entry> e820 = build_e820(mem);
    BootParamsInput params;
    params.setup_header = kernel->setup_header;
    params.cmdline_addr = kCmdlineAddr;
    params.cmdline_size = static_cast<std::uint32_t>(cmdline.capacity() - 1);
    params.initrd = initrd;
    params.e820 = e820;
    if (auto r = write_boot_params(mem, params); !r) {
        return r.error().context("boot parameters");
    }
    if (auto r = write_mptable(mem, config.num_cpus); !r) {
        return r.error().context("MP table");
    }
    if (auto r = write_boot_page_tables(mem); !r) {
        return r.error().context("page tables");
    }
    if (auto r = write_boot_gdt(mem); !r) {
        return r.error().context("descriptor tables");
    }

    BootSetup setup;
    setup.entry = kernel->entry;
    setup.zero_page = kZeroPageAddr;
    setup.stack_pointer = kBootStackPointer;
    setup.pml4 = kPml4Addr;
    setup.gdt = kGdtAddr;
    setup.gdt_limit = kGdtLimit;
    setup.idt = kIdtAddr;
    setup.idt_limit = kIdtLimit;
    setup.kernel = std::move(*kernel);
    setup.initrd = initrd;
    return setup;
}

}  // namespace sbx::boot

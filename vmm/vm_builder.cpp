#include "vmm/vm_builder.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>


#include "devices/pci/pci_host.hpp"
#include "devices/pci/pvpanic.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/boot/linux_boot.hpp"
#include "vmm/kvm/x86_cpu.hpp"
#include "vmm/virtio_devices.hpp"

namespace sbx {

namespace {

constexpr std::size_t kMaxKernelBytes = 512ULL << 20;
// Intel VMX needs three pages for a real-mode TSS below 4 GiB, outside RAM
// and MMIO; just under the BIOS area at the top of the 32-bit space.
constexpr std::uint64_t kTssAddress = 0xfffbd000;
// ISA IRQs wired through the in-kernel PIC/IOAPIC (MP table: ISA IRQ n -> pin n).
constexpr std::uint32_t kI8042Irq = 1;
constexpr std::uint32_t kSerialIrq = 4;
constexpr std::uint64_t kSerialPort = 0x3f8;
// pvpanic's I/O BAR (PCI 00:01.0): above the ISA range Linux keeps for
// legacy devices (PCIBIOS_MIN_IO).
constexpr unsigned kPvPanicSlot = 1;
constexpr std::uint16_t kPvPanicPort = 0x1000;

Result<MmapRegion> map_input_file(const std::string& path, std::size_t limit, std::string_view what) {
    auto data = MmapRegion::map_file(path, limit);
    if (!data) {
        return data.error().context(what);
    }
    return data;
}

Result<kvm::System> open_kvm(const VmConfig& config) {
    auto system = kvm::System::open(config.kvm_device);
    if (!system) {
        return system.error();
    }
    if (config.cpus > system->max_vcpus()) {
        return make_error("{} vCPUs requested; this host's KVM allows {}", config.cpus, system->max_vcpus());
    }
    return system;
}

}  // namespace

Result<std::unique_ptr<Vm>> VmBuilder::build() {
    if (auto r = config_.validate(); !r) {
        return r.error();
    }
    // Mapped for its headers; an ELF's segments are then read from the file
    // straight into guest memory (boot::load_kernel's image_fd), so it
    // stays open until the load.
    auto kernel_file = open_regular_file(config_.kernel, kMaxKernelBytes);
    if (!kernel_file) {
        return kernel_file.error().context("kernel");
    }
    auto kernel = MmapRegion::map_file(*kernel_file, config_.kernel);
    if (!kernel) {
        return kernel.error().context("kernel");
    }
    MmapRegion initrd;
    if (!config_.initrd.empty()) {
        struct stat st {};
        if (::stat(config_.initrd.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            static_cast<std::uint64_t>(st.st_size) > (config_.memory_mib << 20)) {
            return make_error("initrd: {} ({} MiB) does not fit in guest memory ({} MiB)", config_.initrd,
                              st.st_size >> 20, config_.memory_mib);
        }
        auto data = map_input_file(config_.initrd, config_.memory_mib << 20, "initrd");
        if (!data) {
            return data.error();
        }
        initrd = std::move(*data);
    }

    // Backends (disk images, tap, vsock socket) open before anything else
    // that could fail later, so their errors come first and name the file.
    auto devices = open_virtio_devices(config_);
    if (!devices) {
        return devices.error();
    }
    virtio_devices_ = std::move(*devices);

    // Guest memory and the boot structures come first: a bad kernel, initrd
    // or command line is reported before /dev/kvm is touched.
    auto memory = GuestMemory::create(boot::ram_regions(config_.memory_mib << 20));
    if (!memory) {
        return memory.error();
    }
    auto boot = boot::setup_linux_boot(*memory, boot::LinuxBootConfig{
        kernel->bytes(), initrd.bytes(), config_.cmdline + virtio_mmio_cmdline(virtio_devices_.size()),
        config_.cpus, kernel_file->fd.get()});
    if (!boot) {
        return boot.error();
    }
    entry_ = kvm::LongModeEntry{boot->entry.value,   boot->zero_page.value, boot->stack_pointer.value,
                                boot->pml4.value,    boot->gdt.value,       boot->gdt_limit,
                                boot->idt.value,     boot->idt_limit};

    auto system = open_kvm(config_);
    if (!system) {
        return system.error();
    }
    auto machine = assemble(std::move(*system), std::move(*memory));
    if (!machine) {
        return machine.error();
    }
    if (auto r = create_vcpus(**machine); !r) {
        return r.error();
    }
    return std::make_unique<Vm>(std::move(*machine), start_);
}

Result<std::unique_ptr<Vm>> VmBuilder::restore(const MachineState& state, const RestoredMemory& restored) {
    if (auto r = config_.validate(); !r) {
        return r.error();
    }
    if (state.vcpus.size() != config_.cpus) {
        return make_coded_error("config_mismatch", "the snapshot has {} vCPUs, the configuration {}",
                                state.vcpus.size(), config_.cpus);
    }
    auto devices = open_virtio_devices(config_);
    if (!devices) {
        return devices.error();
    }
    virtio_devices_ = std::move(*devices);
    auto system = open_kvm(config_);
    if (!system) {
        return system.error();
    }
    auto supported = system->supported_cpuid();
    if (!supported) {
        return supported.error();
    }
    for (const auto& vcpu : state.vcpus) {
        if (auto r = kvm::check_cpuid_compatible(vcpu.cpuid, *supported); !r) {
            return r.error();
        }
    }
    auto memory = GuestMemory::create(boot::ram_regions(config_.memory_mib << 20), restored.map_region);
    if (!memory) {
        return memory.error();
    }
    if (restored.load) {
        if (auto r = restored.load(*memory); !r) {
            return r.error();
        }
    }
    auto machine = assemble(std::move(*system), std::move(*memory));
    if (!machine) {
        return machine.error();
    }
    if (auto r = restore_vcpus(**machine); !r) {
        return r.error();
    }
    auto vm = std::make_unique<Vm>(std::move(*machine), start_);
    if (auto r = vm->restore_state(state); !r) {
        return r.error().context("restoring the machine state");
    }
    return vm;
}

Result<std::unique_ptr<Machine>> VmBuilder::assemble(kvm::System system, GuestMemory memory) {
    auto console = Console::open(config_.console);
    if (!console) {
        return console.error();
    }
    auto machine = Machine::create(std::move(system), std::move(memory), std::move(*console));
    if (!machine) {
        return machine.error();
    }
    for (auto step : {&VmBuilder::create_irqchip, &VmBuilder::add_legacy_devices, &VmBuilder::add_pci_devices,
                      &VmBuilder::add_virtio_devices}) {
        if (auto r = (this->*step)(**machine); !r) {
            return r.error();
        }
    }
    return machine;
}

Result<void> VmBuilder::create_irqchip(Machine& m) {
    if (auto r = m.kvm_vm.set_tss_address(kTssAddress); !r) {
        return r.error();
    }
    if (auto r = m.kvm_vm.create_irqchip(); !r) {
        return r.error();
    }
    return m.kvm_vm.create_pit();
}

Result<void> VmBuilder::add_legacy_devices(Machine& m) {
    auto serial_irq = m.add_irq_line(kSerialIrq);
    auto i8042_irq = m.add_irq_line(kI8042Irq);
    if (!serial_irq) {
        return serial_irq.error();
    }
    if (!i8042_irq) {
        return i8042_irq.error();
    }
    // Both run on a vCPU thread under the device's lock and never block.
    ConsolePump* console = m.console.get();
    m.serial = std::make_shared<Serial>(**serial_irq, [console] { console->output_ready(); });
    ExitLatch* exits = m.exits.get();
    m.i8042 = std::make_shared<I8042>(**i8042_irq, [exits] {
        exits->request({ExitReason::Reboot, "guest reset through the i8042 controller"});
    });
    m.boot_timer = std::make_shared<BootTimer>(start_);
    if (auto r = m.pio_bus.insert(m.serial, kSerialPort, Serial::kPortCount); !r) {
        return r.error();
    }
    if (auto r = m.pio_bus.insert(m.i8042, I8042::kBasePort, I8042::kPortCount); !r) {
        return r.error();
    }
    return m.mmio_bus.insert(m.boot_timer, boot::kBootTimerAddr, BootTimer::kSize);
}

// The guest's poweroff and panic reach the VMM through pvpanic on PCI
// (docs/guest-layout.md, "Poweroff and panic").
Result<void> VmBuilder::add_pci_devices(Machine& m) {
    auto function = PvPanic::pci_function(kPvPanicPort);
    if (!function) {
        return function.error();
    }
    auto pci_host = std::make_shared<PciHost>();
    if (auto r = pci_host->attach(kPvPanicSlot, std::move(*function)); !r) {
        return r.error();
    }
    ExitLatch* exits = m.exits.get();
    auto pvpanic = std::make_shared<PvPanic>([exits](PvPanic::Event event) {
        if (event == PvPanic::Event::Panicked) {
            exits->request({ExitReason::Panic, "guest kernel panic (pvpanic)"});
        } else {
            exits->request({ExitReason::PowerOff, "guest powered off (pvpanic)"});
        }
    });
    if (auto r = m.pio_bus.insert(pci_host, PciHost::kBasePort, PciHost::kPortCount); !r) {
        return r.error();
    }
    return m.pio_bus.insert(pvpanic, kPvPanicPort, PvPanic::kPortCount);
}

Result<void> VmBuilder::add_virtio_devices(Machine& m) {
    for (std::size_t i = 0; i < virtio_devices_.size(); ++i) {
        const auto slot = static_cast<std::uint32_t>(i);
        const GuestAddress base = boot::virtio_mmio_addr(slot);
        auto irq = m.add_irq_line(boot::virtio_mmio_irq(slot));
        if (!irq) {
            return irq.error();
        }
        auto transport = std::make_shared<virtio::MmioTransport>(std::move(virtio_devices_[i]), m.memory, **irq,
                                                                 *m.device_loop);
        if (auto r = m.mmio_bus.insert(transport, base.value, virtio::kMmioWindow); !r) {
            return r.error();
        }
        // §4.2.3.3: the driver writes the queue index to QueueNotify; with one
        // ioeventfd per index, the vCPU thread never runs device code for it.
        for (std::size_t q = 0; q < transport->queue_count(); ++q) {
            auto notifier = EventFd::create();
            if (!notifier) {
                return notifier.error();
            }
            const int fd = notifier->fd();
            if (auto r = m.kvm_vm.register_ioeventfd(fd, base.value + virtio::mmio_reg::kQueueNotify, 4, true, q);
                !r) {
                return r.error();
            }
            virtio::MmioTransport* t = transport.get();
            auto added = m.device_loop->add(fd, EPOLLIN, [t, fd, q](std::uint32_t) {
                std::uint64_t count = 0;
                [[maybe_unused]] auto n = ::read(fd, &count, sizeof count);
                t->notify(q);
            });
            if (!added) {
                return added.error();
            }
            m.queue_notifiers.push_back(std::move(*notifier));
        }
        m.virtio_devices.push_back(std::move(transport));
    }
    virtio_devices_.clear();
    return ok();
}

// The vCPUs of a restored VM: created bare; Vm::restore_state sets their
// CPUID, registers and MSRs from the snapshot.
Result<void> VmBuilder::restore_vcpus(Machine& m) {
    for (unsigned id = 0; id < config_.cpus; ++id) {
        auto vcpu = m.kvm_vm.create_vcpu(id, m.system.vcpu_mmap_size());
        if (!vcpu) {
            return vcpu.error();
        }
        m.vcpus.push_back(std::move(*vcpu));
    }
    return ok();
}

Result<void> VmBuilder::create_vcpus(Machine& m) {
    auto supported = m.system.supported_cpuid();
    if (!supported) {
        return supported.error();
    }
    const auto msrs = kvm::boot_msrs();
    for (unsigned id = 0; id < config_.cpus; ++id) {
        auto vcpu = m.kvm_vm.create_vcpu(id, m.system.vcpu_mmap_size());
        if (!vcpu) {
            return vcpu.error();
        }
        auto cpuid = kvm::guest_cpuid(*supported, {id, config_.cpus, m.system.has_tsc_deadline_timer()});
        auto r = vcpu->set_cpuid(cpuid);
        if (r) {
            r = vcpu->set_msrs(msrs);
        }
        if (r) {
            r = vcpu->setup_lapic_lints();
        }
        if (!r) {
            return r.error().context(fmt::format("vCPU {}", id));
        }
        // Only the bootstrap processor starts at the kernel entry; the others
        // wait for INIT/SIPI from it (in-kernel LAPIC).
        if (id == 0) {
            if (auto entered = vcpu->setup_long_mode(entry_); !entered) {
                return entered.error().context("vCPU 0");
            }
        }
        m.vcpus.push_back(std::move(*vcpu));
    }
    return ok();
}

}  // namespace sbx

// System and VM ioctls (Documentation/virt/kvm/api.rst, sections 4.x).
#include "vmm/kvm/kvm.hpp"
#include "vmm/kvm/ioctl_numbers.hpp"

#include <fcntl.h>
#include "vmm/kvm/linux_kvm.hpp"
#include <sys/ioctl.h>

#include <array>

namespace sbx::kvm {

namespace {

constexpr int kExpectedApiVersion = 12;  // api.rst 4.1: "should return 12"

struct RequiredCap {
    unsigned cap;
    const char* name;
};
constexpr std::array kRequiredCaps = {
    RequiredCap{KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY"},
    RequiredCap{KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP"},
    RequiredCap{KVM_CAP_PIT2, "KVM_CAP_PIT2"},
    RequiredCap{KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID"},
    RequiredCap{KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR"},
    RequiredCap{KVM_CAP_IRQFD, "KVM_CAP_IRQFD"},
    RequiredCap{KVM_CAP_IOEVENTFD, "KVM_CAP_IOEVENTFD"},
    RequiredCap{KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT"},
};

constexpr std::size_t kInitialCpuidEntries = 128;
constexpr std::size_t kMaxCpuidEntries = 4096;
constexpr std::uint32_t kMaxMsrIndices = 4096;
static_assert(CpuidEntry::kSignificantIndex == KVM_CPUID_FLAG_SIGNIFCANT_INDEX);

}  // namespace

Result<System> System::open(const std::string& path) {
    int raw = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (raw < 0) {
        int err = errno;
        if (err == ENOENT) {
            return make_error("{} does not exist: this host has no KVM (load kvm_intel or kvm_amd, "
                              "or run inside the nested harness tests/nested)", path);
        }
        if (err == EACCES || err == EPERM) {
            return make_error("{} is not accessible to this user (add it to the 'kvm' group or run as root)",
                              path);
        }
        return errno_error(fmt::format("cannot open {}", path), err);
    }
    UniqueFd fd(raw);
    int version = ::ioctl(fd.get(), KVM_GET_API_VERSION, 0);
    if (version != kExpectedApiVersion) {
        return make_error("{}: KVM API version {} (expected {})", path, version, kExpectedApiVersion);
    }
    for (const auto& req : kRequiredCaps) {
        if (::ioctl(fd.get(), KVM_CHECK_EXTENSION, req.cap) <= 0) {
            return make_error("{}: missing required capability {}", path, req.name);
        }
    }
    int mmap_size = ::ioctl(fd.get(), KVM_GET_VCPU_MMAP_SIZE, 0);
    if (mmap_size < 0) {
        return sys_error("KVM_GET_VCPU_MMAP_SIZE");
    }
    if (static_cast<std::size_t>(mmap_size) < sizeof(kvm_run)) {
        return make_error("KVM_GET_VCPU_MMAP_SIZE: {} bytes is smaller than struct kvm_run", mmap_size);
    }
    return System(std::move(fd), static_cast<std::size_t>(mmap_size));
}

int System::check_extension(unsigned capability) const {
    int r = ::ioctl(fd_.get(), KVM_CHECK_EXTENSION, capability);
    return r < 0 ? 0 : r;
}

unsigned System::max_vcpus() const {
    int n = check_extension(KVM_CAP_MAX_VCPUS);
    if (n <= 0) {
        n = check_extension(KVM_CAP_NR_VCPUS);
    }
    return n <= 0 ? 4U : static_cast<unsigned>(n);
}

bool System::has_tsc_deadline_timer() const { return check_extension(KVM_CAP_TSC_DEADLINE_TIMER) > 0; }

Result<std::vector<CpuidEntry>> System::supported_cpuid() const {
    // E2BIG means the buffer was too small (api.rst 4.46): grow and retry.
    for (std::size_t capacity = kInitialCpuidEntries; capacity <= kMaxCpuidEntries; capacity *= 2) {
        std::vector<std::uint8_t> buf(sizeof(kvm_cpuid2) + capacity * sizeof(kvm_cpuid_entry2));
        auto* cpuid = reinterpret_cast<kvm_cpuid2*>(buf.data());
        cpuid->nent = static_cast<std::uint32_t>(capacity);
        if (::ioctl(fd_.get(), KVM_GET_SUPPORTED_CPUID, cpuid) < 0) {
            if (errno == E2BIG) {
                continue;
            }
            return sys_error("KVM_GET_SUPPORTED_CPUID");
        }
        std::vector<CpuidEntry> out;
        out.reserve(cpuid->nent);
        for (std::uint32_t i = 0; i < cpuid->nent; ++i) {
            const auto& e = cpuid->entries[i];
            out.push_back({e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx});
        }
        return out;
    }
    return make_error("KVM_GET_SUPPORTED_CPUID: more than {} entries", kMaxCpuidEntries);
}

Result<std::vector<std::uint32_t>> System::msr_index_list() const {
    // api.rst 4.3: with a too small nmsrs KVM fails with E2BIG and stores the
    // count it needs; the list can grow between calls, so loop.
    kvm_msr_list probe{};
    for (int attempt = 0; attempt < 4; ++attempt) {
        if (::ioctl(fd_.get(), KVM_GET_MSR_INDEX_LIST, &probe) < 0 && errno != E2BIG) {
            return sys_error("KVM_GET_MSR_INDEX_LIST");
        }
        if (probe.nmsrs > kMaxMsrIndices) {
            return make_error("KVM_GET_MSR_INDEX_LIST: {} MSRs (at most {})", probe.nmsrs, kMaxMsrIndices);
        }
        std::vector<std::uint8_t> buf(sizeof(kvm_msr_list) + probe.nmsrs * sizeof(std::uint32_t));
        auto* list = reinterpret_cast<kvm_msr_list*>(buf.data());
        list->nmsrs = probe.nmsrs;
        if (::ioctl(fd_.get(), KVM_GET_MSR_INDEX_LIST, list) < 0) {
            if (errno == E2BIG) {
                probe.nmsrs = list->nmsrs;
                continue;
            }
            return sys_error("KVM_GET_MSR_INDEX_LIST");
        }
        return std::vector<std::uint32_t>(list->indices, list->indices + list->nmsrs);
    }
    return make_error("KVM_GET_MSR_INDEX_LIST: the list kept growing");
}

Result<Vm> System::create_vm() const {
    auto msrs = msr_index_list();
    if (!msrs) {
        return msrs.error();
    }
    // KVM_CREATE_VM can fail with EINTR (seen once under the nested harness:
    // an interrupted set-up of the VM, nothing created); QEMU's kvm_init
    // retries it the same way. Bounded, so that an endless EINTR is reported.
    int raw = -1;
    for (int attempt = 0; attempt < 100; ++attempt) {
        raw = ::ioctl(fd_.get(), KVM_CREATE_VM, 0);
        if (raw >= 0 || errno != EINTR) {
            break;
        }
    }
    if (raw < 0) {
        return sys_error("KVM_CREATE_VM");
    }
    return Vm(UniqueFd(raw), std::make_shared<const std::vector<std::uint32_t>>(std::move(*msrs)));
}

Result<void> Vm::set_user_memory_region(std::uint32_t slot, std::uint64_t guest_phys,
                                        std::uint64_t size, void* host, bool log_dirty) const {
    kvm_userspace_memory_region region{};
    region.slot = slot;
    region.flags = log_dirty ? KVM_MEM_LOG_DIRTY_PAGES : 0;
    region.guest_phys_addr = guest_phys;
    region.memory_size = size;
    region.userspace_addr = reinterpret_cast<std::uint64_t>(host);
    if (::ioctl(fd_.get(), KVM_SET_USER_MEMORY_REGION, &region) < 0) {
        return sys_error("KVM_SET_USER_MEMORY_REGION slot {} at {:#x}", slot, guest_phys);
    }
    return ok();
}

Result<std::vector<std::uint64_t>> Vm::get_dirty_log(std::uint32_t slot, std::uint64_t size) const {
    constexpr std::uint64_t kPage = 4096;
    std::vector<std::uint64_t> bitmap((size / kPage + 63) / 64, 0);
    kvm_dirty_log log{};
    log.slot = slot;
    log.dirty_bitmap = bitmap.data();
    if (::ioctl(fd_.get(), KVM_GET_DIRTY_LOG, &log) < 0) {
        return sys_error("KVM_GET_DIRTY_LOG slot {}", slot);
    }
    return bitmap;
}

Result<void> Vm::create_irqchip() const {
    if (::ioctl(fd_.get(), KVM_CREATE_IRQCHIP, 0) < 0) {
        return sys_error("KVM_CREATE_IRQCHIP");
    }
    return ok();
}

Result<void> Vm::create_pit() const {
    kvm_pit_config config{};
    // A dummy I/O port read at 0x61 speaker port keeps Linux's PIT calibration happy.
    config.flags = KVM_PIT_SPEAKER_DUMMY;
    if (::ioctl(fd_.get(), KVM_CREATE_PIT2, &config) < 0) {
        return sys_error("KVM_CREATE_PIT2");
    }
    return ok();
}

Result<void> Vm::set_tss_address(std::uint64_t addr) const {
    if (::ioctl(fd_.get(), KVM_SET_TSS_ADDR, static_cast<unsigned long>(addr)) < 0) {
        return sys_error("KVM_SET_TSS_ADDR");
    }
    return ok();
}

Result<void> Vm::set_irq_line(std::uint32_t irq, bool level) const {
    kvm_irq_level line{};
    line.irq = irq;
    line.level = level ? 1 : 0;
    if (::ioctl(fd_.get(), KVM_IRQ_LINE, &line) < 0) {
        return sys_error("KVM_IRQ_LINE {}", irq);
    }
    return ok();
}

Result<void> Vm::register_irqfd(int event_fd, std::uint32_t gsi) const {
    kvm_irqfd irqfd{};
    irqfd.fd = static_cast<std::uint32_t>(event_fd);
    irqfd.gsi = gsi;
    if (::ioctl(fd_.get(), KVM_IRQFD, &irqfd) < 0) {
        return sys_error("KVM_IRQFD gsi {}", gsi);
    }
    return ok();
}

Result<void> Vm::register_ioeventfd(int event_fd, std::uint64_t addr, std::uint32_t len, bool is_mmio,
                                    std::optional<std::uint64_t> datamatch) const {
    kvm_ioeventfd io{};
    io.fd = event_fd;
    io.addr = addr;
    io.len = len;
    io.flags = is_mmio ? 0 : KVM_IOEVENTFD_FLAG_PIO;
    if (datamatch) {
        io.flags |= KVM_IOEVENTFD_FLAG_DATAMATCH;
        io.datamatch = *datamatch;
    }
    if (::ioctl(fd_.get(), KVM_IOEVENTFD, &io) < 0) {
        return sys_error("KVM_IOEVENTFD at {:#x}", addr);
    }
    return ok();
}

Result<Vcpu> Vm::create_vcpu(std::uint32_t id, std::size_t mmap_size) const {
    int raw = ::ioctl(fd_.get(), KVM_CREATE_VCPU, static_cast<unsigned long>(id));
    if (raw < 0) {
        return sys_error("KVM_CREATE_VCPU {}", id);
    }
    UniqueFd fd(raw);
    auto run = MmapRegion::shared(fd.get(), mmap_size);
    if (!run) {
        return run.error().context("mapping kvm_run");
    }
    Vcpu::Props props;
    props.msr_indices = msr_indices_;
    // api.rst KVM_GET_XSAVE2: KVM_CHECK_EXTENSION(KVM_CAP_XSAVE2) on the
    // VM fd gives the buffer size; up to 4096 bytes plain KVM_GET_XSAVE does.
    int xsave2 = ::ioctl(fd_.get(), KVM_CHECK_EXTENSION, KVM_CAP_XSAVE2);
    props.xsave_size = xsave2 > static_cast<int>(sizeof(kvm_xsave)) ? static_cast<std::size_t>(xsave2) : 0;
    props.tsc_control = ::ioctl(fd_.get(), KVM_CHECK_EXTENSION, KVM_CAP_TSC_CONTROL) > 0;
    return Vcpu(id, std::move(fd), std::move(*run), std::move(props));
}

}  // namespace sbx::kvm

namespace sbx::kvm::ioctls {

std::uint64_t kvm_type() { return std::uint64_t{KVMIO} << 8; }
std::uint64_t run() { return KVM_RUN; }
std::uint64_t irq_line() { return KVM_IRQ_LINE; }

}  // namespace sbx::kvm::ioctls

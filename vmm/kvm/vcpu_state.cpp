// vCPU state save and restore (Documentation/virt/kvm/api.rst, the KVM_GET_* /
// KVM_SET_* vcpu ioctls named below).
#include <sys/ioctl.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "vmm/kvm/kvm.hpp"
#include "vmm/kvm/linux_kvm.hpp"

namespace sbx::kvm {

namespace {

// MTRRs are saved though KVM_GET_MSR_INDEX_LIST does not list them (QEMU
// saves them the same way): MTRRdefType, the fixed-range MTRRs and the
// variable-range pairs (Intel SDM Vol. 3A 12.11; KVM exposes 8 pairs).
constexpr std::uint32_t kMtrrDefType = 0x2ff;
constexpr std::uint32_t kMtrrFixed[] = {0x250, 0x258, 0x259, 0x268, 0x269, 0x26a,
                                        0x26b, 0x26c, 0x26d, 0x26e, 0x26f};
constexpr std::uint32_t kMtrrPhysBase0 = 0x200;
constexpr std::uint32_t kMtrrVariablePairs = 8;

constexpr std::uint32_t kMsrTsc = 0x10;  // IA32_TIME_STAMP_COUNTER (SDM Vol. 4 table 2-2)

// Below this difference the saved TSC frequency counts as this host's.
constexpr std::uint64_t kTscToleranceppm = 250;

// The saved MSRs with IA32_TSC moved on by `advance_ns` at the saved TSC
// frequency (a host-initiated TSC write sets the guest's TSC to that value,
// and KVM matches vCPUs written within a second of each other).
std::vector<std::pair<std::uint32_t, std::uint64_t>> advance_tsc(const VcpuState& s, std::uint64_t advance_ns) {
    auto msrs = s.msrs;
    if (advance_ns == 0 || s.tsc_khz == 0) {
        return msrs;
    }
    // Whole milliseconds times kHz, then the rest: no overflow for centuries.
    const std::uint64_t ticks = advance_ns / 1'000'000 * s.tsc_khz + advance_ns % 1'000'000 * s.tsc_khz / 1'000'000;
    for (auto& [index, value] : msrs) {
        if (index == kMsrTsc) {
            value += ticks;
        }
    }
    return msrs;
}

std::vector<std::uint32_t> msrs_to_save(const std::vector<std::uint32_t>& kvm_list) {
    std::vector<std::uint32_t> out = kvm_list;
    std::unordered_set<std::uint32_t> seen(kvm_list.begin(), kvm_list.end());
    auto add = [&](std::uint32_t index) {
        if (seen.insert(index).second) {
            out.push_back(index);
        }
    };
    add(kMtrrDefType);
    for (std::uint32_t index : kMtrrFixed) {
        add(index);
    }
    for (std::uint32_t i = 0; i < 2 * kMtrrVariablePairs; ++i) {
        add(kMtrrPhysBase0 + i);
    }
    return out;
}

template <typename T>
Result<void> get(int fd, unsigned long request, const char* name, std::uint32_t id,
                 std::vector<std::uint8_t>& out) {
    T value{};
    if (::ioctl(fd, request, &value) < 0) {
        return sys_error("{} on vCPU {}", name, id);
    }
    out.resize(sizeof(T));
    std::memcpy(out.data(), &value, sizeof(T));
    return ok();
}

// The image's size was checked by VcpuState::decode; a state built in
// memory is checked here again so no ioctl reads past it.
template <typename T>
Result<void> set(int fd, unsigned long request, const char* name, std::uint32_t id,
                 const std::vector<std::uint8_t>& image) {
    if (image.size() != sizeof(T)) {
        return make_error("{} on vCPU {}: saved image is {} bytes, struct is {}", name, id, image.size(),
                          sizeof(T));
    }
    T value{};
    std::memcpy(&value, image.data(), sizeof(T));
    if (::ioctl(fd, request, &value) < 0) {
        return sys_error("{} on vCPU {}", name, id);
    }
    return ok();
}

}  // namespace

Result<std::vector<CpuidEntry>> Vcpu::cpuid() const {
    constexpr std::size_t kCapacity = VcpuState::kMaxCpuidEntries;
    std::vector<std::uint8_t> buf(sizeof(kvm_cpuid2) + kCapacity * sizeof(kvm_cpuid_entry2));
    auto* cpuid = reinterpret_cast<kvm_cpuid2*>(buf.data());
    cpuid->nent = kCapacity;
    if (::ioctl(fd_.get(), KVM_GET_CPUID2, cpuid) < 0) {
        return sys_error("KVM_GET_CPUID2 on vCPU {}", id_);
    }
    std::vector<CpuidEntry> out;
    out.reserve(cpuid->nent);
    for (std::uint32_t i = 0; i < cpuid->nent && i < kCapacity; ++i) {
        const auto& e = cpuid->entries[i];
        out.push_back({e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx});
    }
    return out;
}

Result<std::vector<std::pair<std::uint32_t, std::uint64_t>>> Vcpu::read_msrs() const {
    if (!props_.msr_indices) {
        return make_error("vCPU {}: no MSR index list", id_);
    }
    std::vector<std::uint32_t> indices = msrs_to_save(*props_.msr_indices);
    if (indices.size() > VcpuState::kMaxMsrs) {
        return make_error("vCPU {}: {} MSRs to save (at most {})", id_, indices.size(), VcpuState::kMaxMsrs);
    }
    std::vector<std::uint8_t> buf(sizeof(kvm_msrs) + indices.size() * sizeof(kvm_msr_entry));
    auto* list = reinterpret_cast<kvm_msrs*>(buf.data());
    std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
    out.reserve(indices.size());
    // KVM_GET_MSRS returns how many MSRs it read and stops at the first one
    // it refuses (not emulated for this vCPU's CPUID): skip that one, go on.
    std::size_t next = 0;
    while (next < indices.size()) {
        std::size_t batch = indices.size() - next;
        list->nmsrs = static_cast<std::uint32_t>(batch);
        list->pad = 0;
        for (std::size_t i = 0; i < batch; ++i) {
            list->entries[i] = kvm_msr_entry{};
            list->entries[i].index = indices[next + i];
        }
        int read = ::ioctl(fd_.get(), KVM_GET_MSRS, list);
        if (read < 0) {
            return sys_error("KVM_GET_MSRS on vCPU {}", id_);
        }
        auto got = std::min(static_cast<std::size_t>(read), batch);
        for (std::size_t i = 0; i < got; ++i) {
            out.emplace_back(list->entries[i].index, list->entries[i].data);
        }
        next += got + 1;  // past the refused MSR, if any
    }
    return out;
}

Result<VcpuState> Vcpu::save_state() const {
    VcpuState s;
    const int fd = fd_.get();
    // Order as Firecracker's and cloud-hypervisor's save: KVM_GET_MP_STATE
    // first, since it runs kvm_apic_accept_events(), which may change vCPU
    // and LAPIC state; KVM_GET_VCPU_EVENTS last, since the other GETs may
    // still move pending events.
    auto r = get<kvm_mp_state>(fd, KVM_GET_MP_STATE, "KVM_GET_MP_STATE", id_, s.mp_state);
    if (r)
        r = get<kvm_regs>(fd, KVM_GET_REGS, "KVM_GET_REGS", id_, s.regs);
    if (r)
        r = get<kvm_sregs>(fd, KVM_GET_SREGS, "KVM_GET_SREGS", id_, s.sregs);
    if (r) {
        if (props_.xsave_size > sizeof(kvm_xsave)) {
            // KVM_GET_XSAVE2: the whole area KVM_CAP_XSAVE2 sized (AMX and others past 4 KiB).
            s.xsave.assign(props_.xsave_size, 0);
            if (::ioctl(fd, KVM_GET_XSAVE2, s.xsave.data()) < 0) {
                r = sys_error("KVM_GET_XSAVE2 on vCPU {}", id_);
            }
        } else {
            r = get<kvm_xsave>(fd, KVM_GET_XSAVE, "KVM_GET_XSAVE", id_, s.xsave);
        }
    }
    if (r)
        r = get<kvm_xcrs>(fd, KVM_GET_XCRS, "KVM_GET_XCRS", id_, s.xcrs);
    if (r)
        r = get<kvm_debugregs>(fd, KVM_GET_DEBUGREGS, "KVM_GET_DEBUGREGS", id_, s.debugregs);
    if (r)
        r = get<kvm_lapic_state>(fd, KVM_GET_LAPIC, "KVM_GET_LAPIC", id_, s.lapic);
    if (!r) {
        return r.error();
    }
    if (!cpuid_set_.empty()) {
        s.cpuid = cpuid_set_;
    } else {
        auto entries = cpuid();
        if (!entries) {
            return entries.error();
        }
        s.cpuid = std::move(*entries);
    }
    if (s.cpuid.size() > VcpuState::kMaxCpuidEntries) {
        return make_error("vCPU {}: {} CPUID entries (a snapshot holds at most {})", id_, s.cpuid.size(),
                          VcpuState::kMaxCpuidEntries);
    }
    // KVM_GET_TSC_KHZ returns the frequency; 0 or an error means unknown.
    int khz = ::ioctl(fd, KVM_GET_TSC_KHZ, 0);
    s.tsc_khz = khz > 0 ? static_cast<std::uint32_t>(khz) : 0;
    auto msrs = read_msrs();
    if (!msrs) {
        return msrs.error();
    }
    s.msrs = std::move(*msrs);
    if (auto ev = get<kvm_vcpu_events>(fd, KVM_GET_VCPU_EVENTS, "KVM_GET_VCPU_EVENTS", id_, s.events); !ev) {
        return ev.error();
    }
    return s;
}

Result<void> Vcpu::restore_state(const VcpuState& s, std::uint64_t advance_ns) const {
    const int fd = fd_.get();
    // The TSC frequency first: the TSC MSR below is written in guest ticks.
    if (s.tsc_khz != 0 && props_.tsc_control) {
        int here = ::ioctl(fd, KVM_GET_TSC_KHZ, 0);
        std::uint64_t diff =
            here > 0 ? static_cast<std::uint64_t>(std::abs(here - static_cast<long>(s.tsc_khz))) : s.tsc_khz;
        if (diff * 1000000 > static_cast<std::uint64_t>(s.tsc_khz) * kTscToleranceppm &&
            ::ioctl(fd, KVM_SET_TSC_KHZ, static_cast<unsigned long>(s.tsc_khz)) < 0) {
            return sys_error("KVM_SET_TSC_KHZ {} on vCPU {}", s.tsc_khz, id_);
        }
    }
    // Order as Firecracker's and cloud-hypervisor's restore: CPUID and MP
    // state first (they depend on kvm_vcpu_is_bsp()); KVM_SET_REGS clears
    // pending exceptions, so it precedes KVM_SET_VCPU_EVENTS, which restores
    // them; KVM_SET_SREGS restores the APIC base MSR, so it precedes
    // KVM_SET_LAPIC; the TSC deadline MSR only takes with the LAPIC
    // configured, so KVM_SET_LAPIC precedes KVM_SET_MSRS.
    if (!s.cpuid.empty()) {
        if (auto r = set_cpuid(s.cpuid); !r) {
            return r;
        }
    }
    auto r = set<kvm_mp_state>(fd, KVM_SET_MP_STATE, "KVM_SET_MP_STATE", id_, s.mp_state);
    if (r)
        r = set<kvm_regs>(fd, KVM_SET_REGS, "KVM_SET_REGS", id_, s.regs);
    if (r)
        r = set<kvm_sregs>(fd, KVM_SET_SREGS, "KVM_SET_SREGS", id_, s.sregs);
    if (r) {
        // KVM_SET_XSAVE reads as many bytes as this VM's XSAVE area has
        // (KVM_CAP_XSAVE2), which may exceed the saved image: pad with zeros
        // (components in their init state).
        if (s.xsave.size() < sizeof(kvm_xsave) || s.xsave.size() % 4 != 0) {
            return make_error("KVM_SET_XSAVE on vCPU {}: saved image is {} bytes", id_, s.xsave.size());
        }
        std::vector<std::uint8_t> area(std::max(s.xsave.size(), props_.xsave_size), 0);
        std::memcpy(area.data(), s.xsave.data(), s.xsave.size());
        if (::ioctl(fd, KVM_SET_XSAVE, area.data()) < 0) {
            r = sys_error("KVM_SET_XSAVE on vCPU {}", id_);
        }
    }
    if (r)
        r = set<kvm_xcrs>(fd, KVM_SET_XCRS, "KVM_SET_XCRS", id_, s.xcrs);
    if (r)
        r = set<kvm_debugregs>(fd, KVM_SET_DEBUGREGS, "KVM_SET_DEBUGREGS", id_, s.debugregs);
    if (r)
        r = set<kvm_lapic_state>(fd, KVM_SET_LAPIC, "KVM_SET_LAPIC", id_, s.lapic);
    if (r)
        r = set_msrs(advance_tsc(s, advance_ns));
    if (!r) {
        return r;
    }
    if (s.events.size() != sizeof(kvm_vcpu_events)) {
        return make_error("KVM_SET_VCPU_EVENTS on vCPU {}: saved image is {} bytes", id_, s.events.size());
    }
    kvm_vcpu_events events{};
    std::memcpy(&events, s.events.data(), sizeof events);
    // api.rst KVM_SET_VCPU_EVENTS: nmi.pending and sipi_vector are only
    // restored when these flags say so; KVM_GET_VCPU_EVENTS does not set them.
    events.flags |= KVM_VCPUEVENT_VALID_NMI_PENDING | KVM_VCPUEVENT_VALID_SIPI_VECTOR;
    if (::ioctl(fd, KVM_SET_VCPU_EVENTS, &events) < 0) {
        return sys_error("KVM_SET_VCPU_EVENTS on vCPU {}", id_);
    }
    return ok();
}

Result<void> Vcpu::notify_paused() const {
    if (::ioctl(fd_.get(), KVM_KVMCLOCK_CTRL, 0) < 0 && errno != EINVAL) {
        return sys_error("KVM_KVMCLOCK_CTRL on vCPU {}", id_);
    }
    return ok();
}

}  // namespace sbx::kvm

#include "vmm/kvm/x86_cpu.hpp"

#include <bit>

namespace sbx::kvm {

namespace {

// CPUID bit positions (Intel SDM Vol. 2A, CPUID; AMD APM Vol. 3, E.3).
constexpr std::uint32_t kLeaf1EcxTscDeadline = 1U << 24;
constexpr std::uint32_t kLeaf1EcxHypervisor = 1U << 31;
constexpr std::uint32_t kLeaf1EdxHtt = 1U << 28;
constexpr std::uint32_t kClflushLineSize = 8;  // in 8-byte units: 64 bytes

// KVM paravirtual features, leaf 0x40000001 EAX (Documentation/virt/kvm/
// x86/cpuid.rst): asynchronous page faults, in either delivery.
constexpr std::uint32_t kKvmLeaf = 0x40000001;
constexpr std::uint32_t kKvmFeatureAsyncPf = 1U << 4;
constexpr std::uint32_t kKvmFeatureAsyncPfVmexit = 1U << 10;
constexpr std::uint32_t kKvmFeatureAsyncPfInt = 1U << 14;

// Topology level types for leaves 0xB/0x1F ECX[15:8].
constexpr std::uint32_t kLevelSmt = 1;
constexpr std::uint32_t kLevelCore = 2;

std::uint32_t bits_for(std::uint32_t count) {
    return count <= 1 ? 0 : static_cast<std::uint32_t>(std::bit_width(count - 1));
}

// Leaves 0xB and 0x1F enumerate topology levels by subleaf. KVM reports
// only subleaf 0, zeroed, so the VMM writes all three: SMT (one thread per
// core), core (every vCPU a core of one package), and the invalid level
// that ends the enumeration (Intel SDM Vol. 2A, CPUID leaf 0BH).
void append_topology_leaf(std::vector<CpuidEntry>& out, std::uint32_t function, const CpuTopology& t) {
    constexpr std::uint32_t kFlags = CpuidEntry::kSignificantIndex;
    out.push_back({function, 0, kFlags, 0, 1, (kLevelSmt << 8) | 0, t.vcpu_id});
    out.push_back({function, 1, kFlags, bits_for(t.vcpu_count), t.vcpu_count, (kLevelCore << 8) | 1, t.vcpu_id});
    out.push_back({function, 2, kFlags, 0, 0, 2, t.vcpu_id});
}

}  // namespace

std::vector<CpuidEntry> guest_cpuid(std::vector<CpuidEntry> supported, const CpuTopology& t) {
    std::vector<CpuidEntry> out;
    out.reserve(supported.size() + 4);
    bool has_0b = false;
    bool has_1f = false;
    for (auto& e : supported) {
        if (e.function == 0xb || e.function == 0x1f) {
            (e.function == 0xb ? has_0b : has_1f) = true;
            continue;  // rewritten whole below
        }
        switch (e.function) {
            case 0x1:
                e.ebx = (t.vcpu_id << 24) | ((t.vcpu_count & 0xff) << 16) | (kClflushLineSize << 8) |
                        (e.ebx & 0xff);
                e.ecx |= kLeaf1EcxHypervisor;
                if (t.tsc_deadline) {
                    e.ecx |= kLeaf1EcxTscDeadline;
                }
                if (t.vcpu_count > 1) {
                    e.edx |= kLeaf1EdxHtt;
                } else {
                    e.edx &= ~kLeaf1EdxHtt;
                }
                break;
            case 0x4: {
                // EAX[31:26]: cores per package - 1; EAX[25:14]: threads sharing this cache - 1.
                std::uint32_t cache_level = (e.eax >> 5) & 0x7;
                std::uint32_t sharing = cache_level >= 3 ? t.vcpu_count - 1 : 0;
                e.eax = (e.eax & 0x3fff) | ((sharing & 0xfff) << 14) | (((t.vcpu_count - 1) & 0x3f) << 26);
                break;
            }
            case 0xa:  // no architectural performance monitoring
                e.eax = e.ebx = e.ecx = e.edx = 0;
                break;
            case kKvmLeaf:
                // No async page faults: a guest task waiting for "page
                // ready" can sleep forever when memory comes in through
                // userfaultfd after a restore (seen in a lazy restore here,
                // as in Firecracker #3020; Cloud Hypervisor and libkrun
                // turn them off too). They only help when the host swaps.
                e.eax &= ~(kKvmFeatureAsyncPf | kKvmFeatureAsyncPfVmexit | kKvmFeatureAsyncPfInt);
                break;
            case 0x80000008:
                // ECX[7:0] NC: cores - 1; ECX[15:12] ApicIdSize.
                e.ecx = (e.ecx & ~0xf0ffU) | ((t.vcpu_count - 1) & 0xff) | (bits_for(t.vcpu_count) << 12);
                break;
            case 0x8000001e:
                e.eax = t.vcpu_id;              // extended APIC id
                e.ebx = t.vcpu_id & 0xff;       // compute unit id, one thread per unit
                e.ecx = 0;                      // node 0, one node per package
                break;
            default:
                break;
        }
        out.push_back(e);
    }
    if (has_0b) {
        append_topology_leaf(out, 0xb, t);
    }
    if (has_1f) {
        append_topology_leaf(out, 0x1f, t);
    }
    return out;
}

std::vector<std::pair<std::uint32_t, std::uint64_t>> boot_msrs() {
    // MSR numbers from Intel SDM Vol. 4, Table 2-2.
    constexpr std::uint32_t kSysenterCs = 0x174, kSysenterEsp = 0x175, kSysenterEip = 0x176;
    constexpr std::uint32_t kStar = 0xc0000081, kLstar = 0xc0000082, kCstar = 0xc0000083;
    constexpr std::uint32_t kSyscallMask = 0xc0000084, kKernelGsBase = 0xc0000102;
    constexpr std::uint32_t kTsc = 0x10, kMiscEnable = 0x1a0, kMtrrDefType = 0x2ff;
    constexpr std::uint64_t kMiscEnableFastString = 1;
    constexpr std::uint64_t kMtrrEnable = 1ULL << 11, kMemTypeWriteBack = 6;
    return {
        {kSysenterCs, 0}, {kSysenterEsp, 0}, {kSysenterEip, 0},
        {kStar, 0}, {kCstar, 0}, {kKernelGsBase, 0}, {kSyscallMask, 0}, {kLstar, 0},
        {kTsc, 0},
        {kMiscEnable, kMiscEnableFastString},
        {kMtrrDefType, kMtrrEnable | kMemTypeWriteBack},
    };
}

}  // namespace sbx::kvm

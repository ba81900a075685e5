#include "vmm/kvm/cpuid.hpp"

#include <array>
#include <bit>

namespace sbx::kvm {

namespace {

enum class Reg { Eax, Ebx, Ecx, Edx };

const char* reg_name(Reg r) {
    switch (r) {
        case Reg::Eax:
            return "eax";
        case Reg::Ebx:
            return "ebx";
        case Reg::Ecx:
            return "ecx";
        case Reg::Edx:
            return "edx";
    }
    return "?";
}

std::uint32_t reg_value(const CpuidEntry& e, Reg r) {
    switch (r) {
        case Reg::Eax:
            return e.eax;
        case Reg::Ebx:
            return e.ebx;
        case Reg::Ecx:
            return e.ecx;
        case Reg::Edx:
            return e.edx;
    }
    return 0;
}

// A feature register and the bits in it that are not capabilities of the
// host: set by the VMM (guest_cpuid) or updated by KVM from guest state.
struct FeatureReg {
    std::uint32_t function;
    std::uint32_t index;
    Reg reg;
    std::uint32_t runtime_bits;
};

// Bits from Intel SDM Vol. 2A Table 3-8/3-10 and AMD APM Vol. 3 E.3.
// TSC deadline is reported by KVM_CAP_TSC_DEADLINE_TIMER, not by CPUID (api.rst 4.46).
constexpr std::uint32_t kL1EcxTscDeadline = 1U << 24;
constexpr std::uint32_t kL1EcxOsxsave = 1U << 27;     // mirrors CR4.OSXSAVE
constexpr std::uint32_t kL1EcxHypervisor = 1U << 31;  // set by the VMM
constexpr std::uint32_t kL1EdxApic = 1U << 9;         // mirrors IA32_APIC_BASE.EN
constexpr std::uint32_t kL1EdxHtt = 1U << 28;         // topology, set by the VMM
constexpr std::uint32_t kL7EcxOspke = 1U << 4;        // mirrors CR4.PKE

constexpr std::array kFeatureRegs = {
    FeatureReg{0x1, 0, Reg::Ecx, kL1EcxTscDeadline | kL1EcxOsxsave | kL1EcxHypervisor},
    FeatureReg{0x1, 0, Reg::Edx, kL1EdxApic | kL1EdxHtt},
    FeatureReg{0x7, 0, Reg::Ebx, 0},
    FeatureReg{0x7, 0, Reg::Ecx, kL7EcxOspke},
    FeatureReg{0x7, 0, Reg::Edx, 0},
    FeatureReg{0x7, 1, Reg::Eax, 0},
    FeatureReg{0xd, 0, Reg::Eax, 0},  // XCR0 components, low half
    FeatureReg{0xd, 0, Reg::Edx, 0},  // XCR0 components, high half
    FeatureReg{0xd, 1, Reg::Eax, 0},  // XSAVEOPT, XSAVEC, XGETBV1, XSAVES, XFD
    FeatureReg{0xd, 1, Reg::Ecx, 0},  // IA32_XSS components, low half
    FeatureReg{0xd, 1, Reg::Edx, 0},  // IA32_XSS components, high half
    FeatureReg{0x80000001, 0, Reg::Ecx, 0},
    FeatureReg{0x80000001, 0, Reg::Edx, 0},
    FeatureReg{0x80000008, 0, Reg::Ebx, 0},  // AMD extended features (IBPB, WBNOINVD, ...)
};

// Leaves whose index selects a subleaf; for the others KVM ignores `index`.
bool has_subleaves(std::uint32_t function) {
    return function == 0x7 || function == 0xd;
}

const CpuidEntry* find(std::span<const CpuidEntry> cpuid, std::uint32_t function, std::uint32_t index) {
    for (const auto& e : cpuid) {
        if (e.function == function && (!has_subleaves(function) || e.index == index)) {
            return &e;
        }
    }
    return nullptr;
}

// Leaf 0: the vendor string is EBX, EDX, ECX in that order.
std::string vendor_of(std::span<const CpuidEntry> cpuid) {
    const CpuidEntry* leaf0 = find(cpuid, 0, 0);
    if (leaf0 == nullptr) {
        return {};
    }
    std::string out;
    for (std::uint32_t reg : {leaf0->ebx, leaf0->edx, leaf0->ecx}) {
        for (int i = 0; i < 4; ++i) {
            out.push_back(static_cast<char>((reg >> (8 * i)) & 0xff));
        }
    }
    for (char& c : out) {
        if (c < 0x20 || c > 0x7e) {
            c = '?';
        }
    }
    return out;
}

std::string describe_leaf(const FeatureReg& f) {
    if (has_subleaves(f.function)) {
        return fmt::format("leaf {:#x}.{} {}", f.function, f.index, reg_name(f.reg));
    }
    return fmt::format("leaf {:#x} {}", f.function, reg_name(f.reg));
}

std::string bit_list(std::uint32_t bits) {
    std::string out;
    while (bits != 0) {
        int bit = std::countr_zero(bits);
        bits &= bits - 1;
        out += fmt::format("{}{}", out.empty() ? "" : ",", bit);
    }
    return out;
}

}  // namespace

Result<void> check_cpuid_compatible(std::span<const CpuidEntry> saved,
                                    std::span<const CpuidEntry> host_supported) {
    std::string saved_vendor = vendor_of(saved);
    std::string host_vendor = vendor_of(host_supported);
    if (saved_vendor != host_vendor) {
        return make_coded_error("cpu_mismatch", "the snapshot's CPU vendor is '{}', this host's is '{}'",
                                saved_vendor, host_vendor);
    }
    for (const auto& f : kFeatureRegs) {
        const CpuidEntry* want = find(saved, f.function, f.index);
        if (want == nullptr) {
            continue;
        }
        std::uint32_t wanted = reg_value(*want, f.reg) & ~f.runtime_bits;
        const CpuidEntry* have = find(host_supported, f.function, f.index);
        std::uint32_t offered = have == nullptr ? 0 : reg_value(*have, f.reg);
        std::uint32_t missing = wanted & ~offered;
        if (missing != 0) {
            return make_coded_error(
                "cpu_mismatch",
                "{} bits {} ({:#010x}) are used by the snapshot but not supported by this host's KVM",
                describe_leaf(f), bit_list(missing), missing);
        }
    }
    return ok();
}

CpuSummary summarize_cpuid(std::span<const CpuidEntry> cpuid) {
    CpuSummary s;
    s.vendor = vendor_of(cpuid);
    if (const CpuidEntry* leaf1 = find(cpuid, 1, 0)) {
        std::uint32_t eax = leaf1->eax;
        std::uint32_t base_family = (eax >> 8) & 0xf;
        std::uint32_t base_model = (eax >> 4) & 0xf;
        s.stepping = eax & 0xf;
        s.family = base_family == 0xf ? base_family + ((eax >> 20) & 0xff) : base_family;
        s.model =
            (base_family == 0x6 || base_family == 0xf) ? base_model | (((eax >> 16) & 0xf) << 4) : base_model;
    }
    constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
    constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;
    std::uint64_t h = kFnvOffset;
    auto mix = [&h](std::uint32_t v) {
        for (int i = 0; i < 4; ++i) {
            h ^= (v >> (8 * i)) & 0xff;
            h *= kFnvPrime;
        }
    };
    for (const auto& f : kFeatureRegs) {
        const CpuidEntry* e = find(cpuid, f.function, f.index);
        mix(f.function);
        mix(f.index);
        mix(static_cast<std::uint32_t>(f.reg));
        mix(e == nullptr ? 0 : reg_value(*e, f.reg) & ~f.runtime_bits);
    }
    s.feature_hash = h;
    return s;
}

}  // namespace sbx::kvm

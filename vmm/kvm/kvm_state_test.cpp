// Encoding of saved KVM state and the CPUID checks: no /dev/kvm needed.
#include <doctest/doctest.h>

#include <cstring>

#include "vmm/kvm/kvm_state.hpp"
#include "vmm/kvm/kvm_state_samples.hpp"
#include "vmm/kvm/linux_kvm.hpp"

using namespace sbx;
using namespace sbx::kvm;

namespace {

using testing::pattern;
VcpuState sample_vcpu() { return testing::sample_vcpu_state(); }
VmState sample_vm() { return testing::sample_vm_state(); }

template <typename State>
std::vector<std::uint8_t> encoded(const State& s) {
    ByteWriter w;
    s.encode(w);
    return w.take();
}

template <typename State>
Result<State> decoded(std::span<const std::uint8_t> bytes) {
    ByteReader r(bytes);
    auto s = State::decode(r);
    if (s) {
        if (auto done = r.finish("test"); !done) {
            return done.error();
        }
    }
    return s;
}

bool equal(const VcpuState& a, const VcpuState& b) {
    return a.cpuid == b.cpuid && a.regs == b.regs && a.sregs == b.sregs && a.xsave == b.xsave &&
           a.xcrs == b.xcrs && a.debugregs == b.debugregs && a.lapic == b.lapic && a.events == b.events &&
           a.mp_state == b.mp_state && a.msrs == b.msrs && a.tsc_khz == b.tsc_khz;
}

// Offset of the regs blob's u32 length: version, tsc_khz, cpuid count, entries.
std::size_t regs_length_offset(const VcpuState& s) {
    return 2 + 4 + 4 + s.cpuid.size() * 28;
}

void put_u32(std::vector<std::uint8_t>& bytes, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
        bytes[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
    }
}

}  // namespace

TEST_CASE("VcpuState round-trips through its encoding") {
    auto s = sample_vcpu();
    auto bytes = encoded(s);
    auto back = decoded<VcpuState>(bytes);
    REQUIRE(back);
    CHECK(equal(*back, s));
    CHECK(encoded(*back) == bytes);
}

TEST_CASE("VcpuState decode refuses every truncation") {
    auto bytes = encoded(sample_vcpu());
    for (std::size_t len = 0; len < bytes.size(); ++len) {
        ByteReader r(std::span<const std::uint8_t>(bytes.data(), len));
        auto s = VcpuState::decode(r);
        bool refused = !s || !r.finish("x");
        CHECK_MESSAGE(refused, "length ", len);
    }
}

TEST_CASE("VcpuState decode refuses wrong versions, sizes and counts") {
    auto s = sample_vcpu();
    SUBCASE("version") {
        auto bytes = encoded(s);
        bytes[0] = 2;
        auto r = decoded<VcpuState>(bytes);
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("version 2") != std::string::npos);
    }
    SUBCASE("regs one byte short") {
        s.regs.pop_back();
        auto r = decoded<VcpuState>(encoded(s));
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("regs") != std::string::npos);
    }
    SUBCASE("lapic one byte long") {
        s.lapic.push_back(0);
        CHECK_FALSE(decoded<VcpuState>(encoded(s)));
    }
    SUBCASE("mp_state empty") {
        s.mp_state.clear();
        CHECK_FALSE(decoded<VcpuState>(encoded(s)));
    }
    SUBCASE("xsave smaller than kvm_xsave") {
        s.xsave.resize(sizeof(kvm_xsave) - 4);
        auto r = decoded<VcpuState>(encoded(s));
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("xsave") != std::string::npos);
    }
    SUBCASE("xsave not whole u32s") {
        s.xsave.resize(sizeof(kvm_xsave) + 3);
        CHECK_FALSE(decoded<VcpuState>(encoded(s)));
    }
    SUBCASE("too many XCRs") {
        kvm_xcrs xcrs{};
        xcrs.nr_xcrs = 17;
        std::memcpy(s.xcrs.data(), &xcrs, sizeof xcrs);
        CHECK_FALSE(decoded<VcpuState>(encoded(s)));
    }
    SUBCASE("huge CPUID count") {
        auto bytes = encoded(s);
        put_u32(bytes, 6, 0xffffffff);
        CHECK_FALSE(decoded<VcpuState>(bytes));
    }
    SUBCASE("CPUID count above the limit") {
        s.cpuid.assign(VcpuState::kMaxCpuidEntries + 1, CpuidEntry{});
        CHECK_FALSE(decoded<VcpuState>(encoded(s)));
    }
    SUBCASE("huge regs length") {
        auto bytes = encoded(s);
        put_u32(bytes, regs_length_offset(s), 0x7fffffff);
        CHECK_FALSE(decoded<VcpuState>(bytes));
    }
    SUBCASE("huge MSR count") {
        auto bytes = encoded(s);
        put_u32(bytes, bytes.size() - s.msrs.size() * 12 - 4, 0x10000000);
        CHECK_FALSE(decoded<VcpuState>(bytes));
    }
    SUBCASE("MSR count above the limit") {
        s.msrs.assign(VcpuState::kMaxMsrs + 1, {0x10, 0});
        CHECK_FALSE(decoded<VcpuState>(encoded(s)));
    }
    SUBCASE("trailing bytes") {
        auto bytes = encoded(s);
        bytes.push_back(0);
        CHECK_FALSE(decoded<VcpuState>(bytes));
    }
}

TEST_CASE("VmState round-trips and refuses corruption") {
    auto s = sample_vm();
    auto bytes = encoded(s);
    auto back = decoded<VmState>(bytes);
    REQUIRE(back);
    CHECK(back->pic_master == s.pic_master);
    CHECK(back->pic_slave == s.pic_slave);
    CHECK(back->ioapic == s.ioapic);
    CHECK(back->pit2 == s.pit2);
    CHECK(back->clock == s.clock);

    for (std::size_t len = 0; len < bytes.size(); ++len) {
        ByteReader r(std::span<const std::uint8_t>(bytes.data(), len));
        auto t = VmState::decode(r);
        CHECK((!t || !r.finish("x")));
    }
    SUBCASE("chip ids swapped") {
        std::swap(s.pic_master, s.ioapic);
        auto r = decoded<VmState>(encoded(s));
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("chip id") != std::string::npos);
    }
    SUBCASE("PIT image short") {
        s.pit2.resize(s.pit2.size() - 8);
        CHECK_FALSE(decoded<VmState>(encoded(s)));
    }
    SUBCASE("clock image long") {
        s.clock.resize(s.clock.size() + 8);
        CHECK_FALSE(decoded<VmState>(encoded(s)));
    }
    SUBCASE("version") {
        bytes[1] = 1;
        CHECK_FALSE(decoded<VmState>(bytes));
    }
}

namespace {

// "AuthenticAMD" as leaf 0 reports it (EBX, EDX, ECX).
constexpr CpuidEntry kAmdLeaf0{0, 0, 0, 0x10, 0x68747541, 0x444d4163, 0x69746e65};
// "GenuineIntel".
constexpr CpuidEntry kIntelLeaf0{0, 0, 0, 0x16, 0x756e6547, 0x6c65746e, 0x49656e69};

std::vector<CpuidEntry> host_cpuid() {
    return {
        kAmdLeaf0,
        {1, 0, 0, 0x00a00f11, 0, 0x7ed8320b, 0x178bfbff},
        {7, 0, 1, 1, 0x219c95a9, 0x0040069c, 0x10},
        {7, 1, 1, 0, 0, 0, 0},
        {0xd, 0, 1, 0x7, 0x340, 0x340, 0},
        {0xd, 1, 1, 0xf, 0, 0, 0},
        {0x80000001, 0, 0, 0, 0, 0x75c237ff, 0x2fd3fbff},
        {0x80000008, 0, 0, 0x3030, 0x0100d000, 0, 0},
    };
}

CpuidEntry& leaf(std::vector<CpuidEntry>& v, std::uint32_t fn, std::uint32_t idx = 0) {
    for (auto& e : v) {
        if (e.function == fn && e.index == idx) {
            return e;
        }
    }
    FAIL("no leaf");
    return v.front();
}

}  // namespace

TEST_CASE("check_cpuid_compatible") {
    auto host = host_cpuid();
    SUBCASE("identical is compatible") {
        CHECK(check_cpuid_compatible(host, host));
    }
    SUBCASE("a subset is compatible") {
        auto saved = host;
        leaf(saved, 7).ebx &= ~0x200U;
        CHECK(check_cpuid_compatible(saved, host));
    }
    SUBCASE("bits the VMM and KVM set at run time are not host features") {
        auto saved = host;
        leaf(saved, 1).ecx |= (1U << 31) | (1U << 27) | (1U << 24);  // hypervisor, OSXSAVE, TSC deadline
        leaf(saved, 1).edx |= (1U << 28) | (1U << 9);                // HTT, APIC
        leaf(saved, 7).ecx |= 1U << 4;                               // OSPKE
        CHECK(check_cpuid_compatible(saved, host));
    }
    SUBCASE("a missing feature bit is cpu_mismatch naming it") {
        auto saved = host;
        leaf(saved, 7).ebx |= 1U << 16;  // AVX-512F
        auto r = check_cpuid_compatible(saved, host);
        REQUIRE_FALSE(r);
        const auto& m = r.error().message;
        CHECK(r.error().code == "cpu_mismatch");
        CHECK(m.find("leaf 0x7.0 ebx") != std::string::npos);
        CHECK(m.find("bits 16 ") != std::string::npos);
    }
    SUBCASE("an XSAVE component the host lacks") {
        auto saved = host;
        leaf(saved, 0xd, 0).eax |= 0xe0;  // AVX-512 state
        auto r = check_cpuid_compatible(saved, host);
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("leaf 0xd.0 eax bits 5,6,7") != std::string::npos);
    }
    SUBCASE("a subleaf the host does not report at all") {
        auto saved = host;
        auto host_without = host;
        std::erase_if(host_without, [](const CpuidEntry& e) { return e.function == 7 && e.index == 1; });
        leaf(saved, 7, 1).eax = 1U << 4;  // AVX-VNNI
        auto r = check_cpuid_compatible(saved, host_without);
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("leaf 0x7.1 eax") != std::string::npos);
    }
    SUBCASE("extended leaves") {
        auto saved = host;
        leaf(saved, 0x80000001).ecx |= 1U << 31;
        auto r = check_cpuid_compatible(saved, host);
        REQUIRE_FALSE(r);
        CHECK(r.error().message.find("leaf 0x80000001 ecx bits 31") != std::string::npos);
    }
    SUBCASE("vendor mismatch") {
        auto saved = host;
        leaf(saved, 0) = kIntelLeaf0;
        auto r = check_cpuid_compatible(saved, host);
        REQUIRE_FALSE(r);
        CHECK(r.error().code == "cpu_mismatch");
        CHECK(r.error().message.find("GenuineIntel") != std::string::npos);
        CHECK(r.error().message.find("AuthenticAMD") != std::string::npos);
    }
}

TEST_CASE("summarize_cpuid") {
    auto amd = host_cpuid();
    auto s = summarize_cpuid(amd);
    CHECK(s.vendor == "AuthenticAMD");
    CHECK(s.family == 0x19);
    CHECK(s.model == 0x01);
    CHECK(s.stepping == 1);

    std::vector<CpuidEntry> intel = {kIntelLeaf0, {1, 0, 0, 0x000906ea, 0, 0, 0}};
    auto i = summarize_cpuid(intel);
    CHECK(i.vendor == "GenuineIntel");
    CHECK(i.family == 6);
    CHECK(i.model == 0x9e);
    CHECK(i.stepping == 0xa);

    SUBCASE("the feature hash is stable and sees features, not run-time bits") {
        CHECK(summarize_cpuid(amd).feature_hash == s.feature_hash);
        auto runtime = amd;
        leaf(runtime, 1).ecx |= 1U << 31;
        leaf(runtime, 1).ebx = 0x12345678;  // APIC id, not a feature
        CHECK(summarize_cpuid(runtime).feature_hash == s.feature_hash);
        auto more = amd;
        leaf(more, 7).edx |= 1U << 2;
        CHECK(summarize_cpuid(more).feature_hash != s.feature_hash);
    }
    CHECK(summarize_cpuid({}).vendor.empty());
}

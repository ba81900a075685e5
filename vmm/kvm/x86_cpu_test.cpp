#include <doctest/doctest.h>

#include "vmm/kvm/x86_cpu.hpp"

using namespace sbx::kvm;

namespace {
const CpuidEntry* find(const std::vector<CpuidEntry>& v, std::uint32_t fn, std::uint32_t idx = 0) {
    for (const auto& e : v) {
        if (e.function == fn && e.index == idx) {
            return &e;
        }
    }
    return nullptr;
}
}  // namespace

TEST_CASE("guest_cpuid sets APIC ids, counts and the hypervisor bit") {
    std::vector<CpuidEntry> supported = {
        {0x1, 0, 0, 0x800f12, 0x00000800, 0x1, 0x10000000},
        {0xa, 0, 0, 0x7300403, 1, 2, 3},
        {0xb, 0, 1, 0, 0, 0, 0},  // KVM reports only subleaf 0, zeroed
        {0x4, 3, 1, 0x163, 0, 0, 0},  // an L3 cache descriptor
        {0x80000008, 0, 0, 0x3030, 0, 0xffff, 0},
    };
    auto out = guest_cpuid(supported, CpuTopology{3, 4, true});
    const auto* l1 = find(out, 0x1);
    REQUIRE(l1);
    CHECK((l1->ebx >> 24) == 3);
    CHECK(((l1->ebx >> 16) & 0xff) == 4);
    CHECK((l1->ecx & (1U << 31)) != 0);
    CHECK((l1->ecx & (1U << 24)) != 0);
    CHECK((l1->edx & (1U << 28)) != 0);
    CHECK(find(out, 0xa)->eax == 0);
    CHECK(find(out, 0xb, 0)->ebx == 1);
    CHECK(find(out, 0xb, 1)->ebx == 4);
    CHECK(find(out, 0xb, 1)->eax == 2);
    CHECK(find(out, 0xb, 1)->edx == 3);
    REQUIRE(find(out, 0xb, 2));
    CHECK(find(out, 0xb, 2)->ebx == 0);
    CHECK(((find(out, 0xb, 1)->ecx >> 8) & 0xff) == 2);  // core level
    CHECK(find(out, 0x1f) == nullptr);                   // not invented when absent
    CHECK((find(out, 0x4, 3)->eax >> 26) == 3);
    CHECK(((find(out, 0x4, 3)->eax >> 14) & 0xfff) == 3);
    CHECK((find(out, 0x80000008)->ecx & 0xff) == 3);
}

TEST_CASE("guest_cpuid for a single vCPU clears HTT") {
    std::vector<CpuidEntry> supported = {{0x1, 0, 0, 0, 0, 0, 0x10000000}};
    auto out = guest_cpuid(supported, CpuTopology{0, 1, false});
    CHECK((out[0].edx & (1U << 28)) == 0);
    CHECK((out[0].ecx & (1U << 24)) == 0);
}

TEST_CASE("boot MSRs enable MTRRs with write-back default") {
    auto msrs = boot_msrs();
    bool found = false;
    for (auto [index, value] : msrs) {
        if (index == 0x2ff) {
            found = true;
            CHECK(value == ((1ULL << 11) | 6));
        }
    }
    CHECK(found);
}

TEST_CASE("guest_cpuid hides KVM async page faults and keeps the other PV features") {
    // kvmclock (bits 0, 3), async PF (4), PV EOI (6), async PF VM exit (10), async PF INT (14).
    const std::uint32_t offered = (1U << 0) | (1U << 3) | (1U << 4) | (1U << 6) | (1U << 10) | (1U << 14);
    std::vector<CpuidEntry> supported = {{0x40000001, 0, 0, offered, 0, 0, 0}};
    auto out = guest_cpuid(supported, CpuTopology{0, 1, false});
    const auto* kvm = find(out, 0x40000001);
    REQUIRE(kvm);
    CHECK(kvm->eax == ((1U << 0) | (1U << 3) | (1U << 6)));
}

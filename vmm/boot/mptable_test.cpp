#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "vmm/boot/mptable.hpp"
#include "vmm/boot/test_images.hpp"

using namespace sbx;
using namespace sbx::boot;
using namespace sbx::boot::testing;

namespace {

// doctest binds operands by reference, which packed fields do not allow.
template <typename T>
T v(T value) {
    return value;
}

unsigned byte_sum(const std::vector<std::uint8_t>& bytes) {
    return std::accumulate(bytes.begin(), bytes.end(), 0U) & 0xff;
}

std::vector<std::uint8_t> read_bytes(const GuestMemory& mem, GuestAddress addr, std::size_t size) {
    std::vector<std::uint8_t> out(size);
    REQUIRE(mem.read(addr, out));
    return out;
}

// Walks the base table and counts entries by type; checks each entry's size.
std::array<unsigned, 5> count_entries(const std::vector<std::uint8_t>& table) {
    std::array<unsigned, 5> counts{};
    std::size_t at = sizeof(mp::TableHeader);
    while (at < table.size()) {
        const std::uint8_t type = table[at];
        REQUIRE(type <= mp::kLocalInterrupt);
        ++counts[type];
        at += type == mp::kProcessor ? sizeof(mp::ProcessorEntry) : 8;
    }
    CHECK(at == table.size());
    return counts;
}

}  // namespace

TEST_CASE("the MP floating pointer points at a checksummed configuration table") {
    auto mem = make_guest_memory(64 * kMiB);
    for (unsigned cpus : {1U, 2U, 8U, kMpTableMaxCpus}) {
        CAPTURE(cpus);
        REQUIRE(write_mptable(mem, cpus));

        auto fp = mem.read_obj<mp::FloatingPointer>(kMpTableAddr).value();
        CHECK(std::string(fp.signature, 4) == "_MP_");
        CHECK(fp.length == 1);
        CHECK(fp.spec_rev == 4);
        CHECK(v(fp.physical_pointer) == kMpTableAddr.value + 16);
        CHECK(byte_sum(read_bytes(mem, kMpTableAddr, 16)) == 0);

        auto header = mem.read_obj<mp::TableHeader>(GuestAddress(fp.physical_pointer)).value();
        CHECK(std::string(header.signature, 4) == "PCMP");
        CHECK(header.spec_rev == 4);
        CHECK(v(header.lapic_address) == 0xfee00000);
        CHECK(std::string(header.oem_id, 8) == "SANDBOX ");
        CHECK(v(header.base_table_length) == mptable_size(cpus) - 16);
        CHECK(v(fp.physical_pointer) + header.base_table_length <= 0xa0000);
        auto table = read_bytes(mem, GuestAddress(fp.physical_pointer), header.base_table_length);
        CHECK(byte_sum(table) == 0);

        auto counts = count_entries(table);
        CHECK(counts[mp::kProcessor] == cpus);
        CHECK(counts[mp::kBus] == 1);
        CHECK(counts[mp::kIoApic] == 1);
        CHECK(counts[mp::kIoInterrupt] == 24);
        CHECK(counts[mp::kLocalInterrupt] == 2);
        CHECK(v(header.entry_count) == cpus + 1 + 1 + 24 + 2);
    }
}

TEST_CASE("MP entries describe the CPUs, the IOAPIC and the interrupt routing") {
    auto mem = make_guest_memory(64 * kMiB);
    const unsigned cpus = 4;
    REQUIRE(write_mptable(mem, cpus));
    GuestAddress at = kMpTableAddr + 16 + sizeof(mp::TableHeader);
    for (unsigned i = 0; i < cpus; ++i) {
        auto cpu = mem.read_obj<mp::ProcessorEntry>(at).value();
        CHECK(cpu.entry_type == mp::kProcessor);
        CHECK(cpu.lapic_id == i);
        CHECK(cpu.lapic_version == 0x14);
        CHECK(cpu.cpu_flags == (i == 0 ? 3 : 1));  // EN, plus BP on CPU 0
        CHECK(v(cpu.feature_flags) != 0);
        at = at + sizeof(cpu);
    }
    auto bus = mem.read_obj<mp::BusEntry>(at).value();
    CHECK(bus.entry_type == mp::kBus);
    CHECK(std::string(bus.bus_type, 6) == "ISA   ");
    at = at + sizeof(bus);
    auto ioapic = mem.read_obj<mp::IoApicEntry>(at).value();
    CHECK(ioapic.entry_type == mp::kIoApic);
    CHECK(ioapic.ioapic_id == cpus);
    CHECK(ioapic.ioapic_version == 0x11);
    CHECK(ioapic.flags == 1);
    CHECK(v(ioapic.address) == 0xfec00000);
    at = at + sizeof(ioapic);
    for (unsigned irq = 0; irq < 24; ++irq) {
        auto e = mem.read_obj<mp::InterruptEntry>(at).value();
        CHECK(e.entry_type == mp::kIoInterrupt);
        CHECK(e.interrupt_type == mp::kInterruptInt);
        CHECK(v(e.flags) == 0);
        CHECK(e.source_bus_id == bus.bus_id);
        CHECK(e.source_bus_irq == irq);
        CHECK(e.dest_apic_id == cpus);
        CHECK(e.dest_pin == irq);
        at = at + sizeof(e);
    }
    auto lint0 = mem.read_obj<mp::InterruptEntry>(at).value();
    auto lint1 = mem.read_obj<mp::InterruptEntry>(at + 8).value();
    CHECK(lint0.entry_type == mp::kLocalInterrupt);
    CHECK(lint0.interrupt_type == mp::kInterruptExtInt);
    CHECK(lint0.dest_apic_id == 0xff);
    CHECK(lint0.dest_pin == 0);
    CHECK(lint1.interrupt_type == mp::kInterruptNmi);
    CHECK(lint1.dest_apic_id == 0xff);
    CHECK(lint1.dest_pin == 1);
}

TEST_CASE("write_mptable refuses 0 CPUs and tables that overflow the EBDA") {
    auto mem = make_guest_memory(64 * kMiB);
    CHECK(kMpTableMaxCpus == 37);
    CHECK(kMpTableAddr.value + mptable_size(kMpTableMaxCpus) <= 0xa0000);
    CHECK(kMpTableAddr.value + mptable_size(kMpTableMaxCpus + 1) > 0xa0000);
    CHECK_FALSE(write_mptable(mem, 0));
    auto r = write_mptable(mem, kMpTableMaxCpus + 1);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("at most 37") != std::string::npos);
    CHECK_FALSE(write_mptable(mem, 255));
}

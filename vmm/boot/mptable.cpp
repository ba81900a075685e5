#include "vmm/boot/mptable.hpp"

#include <cstring>
#include <numeric>
#include <vector>

namespace sbx::boot {

namespace {

using namespace mp;

// CPUID.1:EAX for family 6, model 0, stepping 0; CPUID.1:EDX FPU | APIC.
constexpr std::uint32_t kCpuSignature = 6U << 8;
constexpr std::uint32_t kFeatureFpu = 1U << 0;
constexpr std::uint32_t kFeatureApic = 1U << 9;

// Appends the bytes of a packed structure to the table being built.
template <typename T>
void append(std::vector<std::uint8_t>& out, const T& entry) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&entry);
    out.insert(out.end(), bytes, bytes + sizeof(T));
}

// The byte that makes the sum of `bytes` (checksum byte included) zero.
std::uint8_t checksum_for(const std::uint8_t* bytes, std::size_t size) {
    const unsigned sum = std::accumulate(bytes, bytes + size, 0U);
    return static_cast<std::uint8_t>(0x100 - (sum & 0xff));
}

// Copies text into a fixed-size, space-padded MP string field.
template <std::size_t N>
void set_string(char (&field)[N], const char* text) {
    std::memset(field, ' ', N);
    std::memcpy(field, text, std::min(N, std::strlen(text)));
}

// The base configuration table: header then entries, sorted by entry type
// as MP spec 4.3 requires.
std::vector<std::uint8_t> build_config_table(unsigned num_cpus) {
    std::vector<std::uint8_t> entries;
    std::uint16_t count = 0;
    for (unsigned cpu = 0; cpu < num_cpus; ++cpu, ++count) {
        ProcessorEntry p{};
        p.entry_type = kProcessor;
        p.lapic_id = static_cast<std::uint8_t>(cpu);
        p.lapic_version = kLapicVersion;
        p.cpu_flags = static_cast<std::uint8_t>(kCpuEnabled | (cpu == 0 ? kCpuBootProcessor : 0));
        p.cpu_signature = kCpuSignature;
        p.feature_flags = kFeatureFpu | kFeatureApic;
        append(entries, p);
    }
    BusEntry bus{};
    bus.entry_type = kBus;
    bus.bus_id = kIsaBusId;
    set_string(bus.bus_type, "ISA");
    append(entries, bus);
    ++count;

    const auto ioapic_id = static_cast<std::uint8_t>(num_cpus);
    IoApicEntry ioapic{};
    ioapic.entry_type = kIoApic;
    ioapic.ioapic_id = ioapic_id;
    ioapic.ioapic_version = kIoApicVersion;
    ioapic.flags = kIoApicEnabled;
    ioapic.address = static_cast<std::uint32_t>(kIoapicAddr);
    append(entries, ioapic);
    ++count;

    for (std::size_t pin = 0; pin < kIoInterruptEntries; ++pin, ++count) {
        // flags 0: polarity and trigger mode conform to the ISA bus.
        InterruptEntry irq{};
        irq.entry_type = kIoInterrupt;
        irq.interrupt_type = kInterruptInt;
        irq.source_bus_id = kIsaBusId;
        irq.source_bus_irq = static_cast<std::uint8_t>(pin);
        irq.dest_apic_id = ioapic_id;
        irq.dest_pin = static_cast<std::uint8_t>(pin);
        append(entries, irq);
    }
    // ExtINT (the 8259 PIC) on LINT0 and NMI on LINT1 of every local APIC.
    const std::uint8_t local_types[kLocalInterruptEntries] = {kInterruptExtInt, kInterruptNmi};
    for (std::uint8_t lint = 0; lint < kLocalInterruptEntries; ++lint, ++count) {
        InterruptEntry irq{};
        irq.entry_type = kLocalInterrupt;
        irq.interrupt_type = local_types[lint];
        irq.source_bus_id = kIsaBusId;
        irq.dest_apic_id = kAllLapics;
        irq.dest_pin = lint;
        append(entries, irq);
    }

    TableHeader header{};
    std::memcpy(header.signature, "PCMP", 4);
    header.base_table_length = static_cast<std::uint16_t>(sizeof(TableHeader) + entries.size());
    header.spec_rev = kSpecRev1_4;
    set_string(header.oem_id, "SANDBOX");
    set_string(header.product_id, "MICROVM");
    header.entry_count = count;
    header.lapic_address = static_cast<std::uint32_t>(kLapicAddr);

    std::vector<std::uint8_t> table;
    table.reserve(header.base_table_length);
    append(table, header);
    table.insert(table.end(), entries.begin(), entries.end());
    table[offsetof(TableHeader, checksum)] = checksum_for(table.data(), table.size());
    return table;
}

}  // namespace

Result<void> write_mptable(const GuestMemory& mem, unsigned num_cpus) {
    if (num_cpus == 0) {
        return make_error("MP table needs at least one CPU");
    }
    if (num_cpus > kMpTableMaxCpus) {
        return make_error("{} CPUs do not fit in the MP table below {:#x} (at most {})", num_cpus,
                          kLowMemoryEnd, kMpTableMaxCpus);
    }
    const GuestAddress table_addr = kMpTableAddr + sizeof(FloatingPointer);

    FloatingPointer fp{};
    std::memcpy(fp.signature, "_MP_", 4);
    fp.physical_pointer = static_cast<std::uint32_t>(table_addr.value);
    fp.length = 1;
    fp.spec_rev = kSpecRev1_4;
    fp.checksum = checksum_for(reinterpret_cast<const std::uint8_t*>(&fp), sizeof(fp));

    std::vector<std::uint8_t> image;
    image.reserve(mptable_size(num_cpus));
    append(image, fp);
    const auto table = build_config_table(num_cpus);
    image.insert(image.end(), table.begin(), table.end());
    return mem.write(kMpTableAddr, image);
}

}  // namespace sbx::boot

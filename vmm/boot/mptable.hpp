// The Intel MultiProcessor Specification 1.4 tables that tell the kernel
// about the vCPUs, the IOAPIC and interrupt routing (MP spec chapter 4;
// arch/x86/include/asm/mpspec_def.h). Written at layout::kMpTableAddr, the
// last KiB of base memory, which the kernel scans for the "_MP_" signature.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/result.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/memory/guest_memory.hpp"

namespace sbx::boot {

namespace mp {

// 4.1 MP Floating Pointer Structure (struct mpf_intel).
struct [[gnu::packed]] FloatingPointer {
    char signature[4];  // "_MP_"
    std::uint32_t physical_pointer;  // the configuration table header
    std::uint8_t length;             // in 16-byte paragraphs: 1
    std::uint8_t spec_rev;           // 4 = version 1.4
    std::uint8_t checksum;           // all 16 bytes sum to 0
    std::uint8_t feature1;           // 0: a configuration table is present
    std::uint8_t feature2;           // bit 7 IMCRP clear: virtual wire mode
    std::uint8_t feature3_5[3];
};

// 4.2 MP Configuration Table Header (struct mpc_table).
struct [[gnu::packed]] TableHeader {
    char signature[4];  // "PCMP"
    std::uint16_t base_table_length;  // header plus base entries
    std::uint8_t spec_rev;
    std::uint8_t checksum;  // the base table sums to 0
    char oem_id[8];
    char product_id[12];
    std::uint32_t oem_table_pointer;
    std::uint16_t oem_table_size;
    std::uint16_t entry_count;
    std::uint32_t lapic_address;
    std::uint16_t extended_table_length;
    std::uint8_t extended_table_checksum;
    std::uint8_t reserved;
};

// 4.3.1 Processor Entries (struct mpc_cpu).
struct [[gnu::packed]] ProcessorEntry {
    std::uint8_t entry_type;  // 0
    std::uint8_t lapic_id;
    std::uint8_t lapic_version;
    std::uint8_t cpu_flags;  // bit 0 EN, bit 1 BP
    std::uint32_t cpu_signature;  // CPUID.1:EAX stepping/model/family
    std::uint32_t feature_flags;  // CPUID.1:EDX
    std::uint32_t reserved[2];
};

// 4.3.2 Bus Entries (struct mpc_bus).
struct [[gnu::packed]] BusEntry {
    std::uint8_t entry_type;  // 1
    std::uint8_t bus_id;
    char bus_type[6];  // space-padded, e.g. "ISA   "
};

// 4.3.3 I/O APIC Entries (struct mpc_ioapic).
struct [[gnu::packed]] IoApicEntry {
    std::uint8_t entry_type;  // 2
    std::uint8_t ioapic_id;
    std::uint8_t ioapic_version;
    std::uint8_t flags;  // bit 0 EN
    std::uint32_t address;
};

// 4.3.4 I/O Interrupt Assignment Entries (struct mpc_intsrc) and 4.3.5 Local
// Interrupt Assignment Entries (struct mpc_lintsrc) share one layout.
struct [[gnu::packed]] InterruptEntry {
    std::uint8_t entry_type;  // 3 (I/O) or 4 (local)
    std::uint8_t interrupt_type;  // INT, NMI, SMI, ExtINT
    std::uint16_t flags;  // bits 0-1 polarity, 2-3 trigger mode; 0 = conforms to bus
    std::uint8_t source_bus_id;
    std::uint8_t source_bus_irq;
    std::uint8_t dest_apic_id;  // IOAPIC id, or LAPIC id (0xff: all)
    std::uint8_t dest_pin;  // IOAPIC INTIN#, or LAPIC LINTIN#
};

static_assert(sizeof(FloatingPointer) == 16);
static_assert(sizeof(TableHeader) == 44);
static_assert(sizeof(ProcessorEntry) == 20);
static_assert(sizeof(BusEntry) == 8);
static_assert(sizeof(IoApicEntry) == 8);
static_assert(sizeof(InterruptEntry) == 8);

// Entry types (Table 4-3).
inline constexpr std::uint8_t kProcessor = 0;
inline constexpr std::uint8_t kBus = 1;
inline constexpr std::uint8_t kIoApic = 2;
inline constexpr std::uint8_t kIoInterrupt = 3;
inline constexpr std::uint8_t kLocalInterrupt = 4;
// Interrupt types (Table 4-10).
inline constexpr std::uint8_t kInterruptInt = 0;
inline constexpr std::uint8_t kInterruptNmi = 1;
inline constexpr std::uint8_t kInterruptExtInt = 3;

inline constexpr std::uint8_t kSpecRev1_4 = 4;
inline constexpr std::uint8_t kCpuEnabled = 1U << 0;
inline constexpr std::uint8_t kCpuBootProcessor = 1U << 1;
inline constexpr std::uint8_t kIoApicEnabled = 1U << 0;
inline constexpr std::uint8_t kAllLapics = 0xff;
// Versions of KVM's in-kernel local APIC and IOAPIC.
inline constexpr std::uint8_t kLapicVersion = 0x14;
inline constexpr std::uint8_t kIoApicVersion = 0x11;
inline constexpr std::uint8_t kIsaBusId = 0;
// Every IOAPIC pin gets an I/O interrupt entry; two local interrupt entries.
inline constexpr std::size_t kIoInterruptEntries = kIoapicPins;
inline constexpr std::size_t kLocalInterruptEntries = 2;

}  // namespace mp

// Bytes the floating pointer plus configuration table take for num_cpus.
[[nodiscard]] constexpr std::size_t mptable_size(std::size_t num_cpus) {
    return sizeof(mp::FloatingPointer) + sizeof(mp::TableHeader) +
           num_cpus * sizeof(mp::ProcessorEntry) + sizeof(mp::BusEntry) + sizeof(mp::IoApicEntry) +
           (mp::kIoInterruptEntries + mp::kLocalInterruptEntries) * sizeof(mp::InterruptEntry);
}

// APIC ids are 8-bit and 0xff is the broadcast id; the IOAPIC takes the id
// after the last CPU, so at most 254 CPUs can be described at all.
inline constexpr unsigned kMpMaxApicCpus = 254;
// The tables must also fit in [kMpTableAddr, 0xa0000), which bounds the CPU
// count further (to 37).
inline constexpr unsigned kMpTableMaxCpus = [] {
    unsigned n = 0;
    while (n < kMpMaxApicCpus && kMpTableAddr.value + mptable_size(n + 1) <= kLowMemoryEnd) {
        ++n;
    }
    return n;
}();

// Writes the floating pointer and configuration table for CPUs 0..num_cpus-1
// (LAPIC id = index, CPU 0 the bootstrap processor), one ISA bus, one IOAPIC
// (id num_cpus) whose pins 0..23 receive ISA IRQs 0..23, ExtINT on LINT0 and
// NMI on LINT1 of every LAPIC.
[[nodiscard]] Result<void> write_mptable(const GuestMemory& mem, unsigned num_cpus);

}  // namespace sbx::boot

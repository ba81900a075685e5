#include "vmm/boot/page_tables.hpp"

#include <array>

namespace sbx::boot {

namespace {

using TablePage = std::array<std::uint64_t, kEntriesPerTable>;

}  // namespace

Result<void> write_boot_page_tables(const GuestMemory& mem) {
    TablePage pml4{};
    pml4[0] = kPdptAddr.value | kPtePresent | kPteWritable;
    TablePage pdpt{};
    pdpt[0] = kPdAddr.value | kPtePresent | kPteWritable;
    TablePage pd{};
    for (std::uint64_t i = 0; i < kEntriesPerTable; ++i) {
        pd[i] = (i * kLargePageSize) | kPtePresent | kPteWritable | kPtePageSize;
    }
    if (auto r = mem.write_obj(kPml4Addr, pml4); !r) {
        return r.error().context("PML4");
    }
    if (auto r = mem.write_obj(kPdptAddr, pdpt); !r) {
        return r.error().context("PDPT");
    }
    if (auto r = mem.write_obj(kPdAddr, pd); !r) {
        return r.error().context("page directory");
    }
    return ok();
}

Result<void> write_boot_gdt(const GuestMemory& mem) {
    if (auto r = mem.write_obj(kGdtAddr, x86::kBootGdt); !r) {
        return r.error().context("GDT");
    }
    if (auto r = mem.fill(kIdtAddr, kIdtSize, 0); !r) {
        return r.error().context("IDT");
    }
    return ok();
}

}  // namespace sbx::boot

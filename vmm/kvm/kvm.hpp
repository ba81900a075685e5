// The KVM layer: RAII owners of the /dev/kvm system fd, a VM fd and vCPU fds.
// This is the only layer that includes <linux/kvm.h> (in its .cpp files);
// everything above it sees plain C++ types.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/mmap_region.hpp"
#include "base/result.hpp"
#include "base/unique_fd.hpp"
#include "vmm/kvm/cpuid.hpp"
#include "vmm/kvm/kvm_state.hpp"

namespace sbx::kvm {

class Vm;

class System {
public:
    // Opens /dev/kvm (or `path`) and checks the API version and the
    // capabilities this VMM relies on; each failure is a one-line reason.
    static Result<System> open(const std::string& path = "/dev/kvm");

    [[nodiscard]] int fd() const { return fd_.get(); }
    [[nodiscard]] int check_extension(unsigned capability) const;
    // KVM_CAP_MAX_VCPUS, falling back to KVM_CAP_NR_VCPUS as api.rst advises.
    [[nodiscard]] unsigned max_vcpus() const;
    [[nodiscard]] bool has_tsc_deadline_timer() const;
    [[nodiscard]] std::size_t vcpu_mmap_size() const { return vcpu_mmap_size_; }
    [[nodiscard]] Result<std::vector<CpuidEntry>> supported_cpuid() const;
    // KVM_GET_MSR_INDEX_LIST (api.rst 4.3): the MSRs KVM saves and emulates.
    [[nodiscard]] Result<std::vector<std::uint32_t>> msr_index_list() const;
    // The VM remembers the MSR index list for its vCPUs' save_state().
    [[nodiscard]] Result<Vm> create_vm() const;

private:
    System(UniqueFd fd, std::size_t mmap_size) : fd_(std::move(fd)), vcpu_mmap_size_(mmap_size) {}
    UniqueFd fd_;
    std::size_t vcpu_mmap_size_ = 0;
};

class Vcpu;

class Vm {
public:
    [[nodiscard]] int fd() const { return fd_.get(); }

    // With `log_dirty` (KVM_MEM_LOG_DIRTY_PAGES), KVM records the guest's
    // writes to the slot for get_dirty_log; a slot's flags may change while
    // vCPUs run.
    Result<void> set_user_memory_region(std::uint32_t slot, std::uint64_t guest_phys,
                                        std::uint64_t size, void* host, bool log_dirty = false) const;
    // KVM_GET_DIRTY_LOG (api.rst 4.8): one bit per 4 KiB page of a slot of
    // `size` bytes, set for each page the guest wrote since the previous
    // call (or since logging began); the call clears them.
    [[nodiscard]] Result<std::vector<std::uint64_t>> get_dirty_log(std::uint32_t slot, std::uint64_t size) const;
    // In-kernel PIC + IOAPIC + LAPICs, and the i8254 PIT (KVM_CREATE_PIT2).
    Result<void> create_irqchip() const;
    Result<void> create_pit() const;
    // Address of the 3-page TSS region Intel VMX needs below 4 GiB; it must
    // not overlap RAM or MMIO.
    Result<void> set_tss_address(std::uint64_t addr) const;
    Result<void> set_irq_line(std::uint32_t irq, bool level) const;
    Result<void> register_irqfd(int event_fd, std::uint32_t gsi) const;
    // KVM_IOEVENTFD: a guest write of `len` bytes at `addr` signals
    // event_fd instead of exiting; with `datamatch`, only writes of that value.
    Result<void> register_ioeventfd(int event_fd, std::uint64_t addr, std::uint32_t len, bool is_mmio,
                                    std::optional<std::uint64_t> datamatch = std::nullopt) const;
    Result<Vcpu> create_vcpu(std::uint32_t id, std::size_t mmap_size) const;

    // PIC master and slave, IOAPIC (KVM_GET_IRQCHIP), PIT (KVM_GET_PIT2) and
    // kvmclock (KVM_GET_CLOCK). The VM must have an in-kernel irqchip and PIT.
    [[nodiscard]] Result<VmState> save_state() const;
    // KVM_SET_CLOCK, KVM_SET_PIT2, KVM_SET_IRQCHIP x3, onto a VM created with
    // an in-kernel irqchip and PIT. Restore the VM before its vCPUs. Returns
    // the nanoseconds the clock was advanced past the saved value (0 for
    // Continue), for Vcpu::restore_state to advance each TSC alike.
    [[nodiscard]] Result<std::uint64_t> restore_state(const VmState& state,
                                                      ClockRestore clock = ClockRestore::Continue) const;

private:
    friend class System;
    Vm(UniqueFd fd, std::shared_ptr<const std::vector<std::uint32_t>> msr_indices)
        : fd_(std::move(fd)), msr_indices_(std::move(msr_indices)) {}
    UniqueFd fd_;
    std::shared_ptr<const std::vector<std::uint32_t>> msr_indices_;
};

// Typed vCPU exits. I/O and MMIO data point into the kvm_run page and are
// valid until the next run().
struct IoIn {
    std::uint16_t port;
    std::uint8_t size;                // bytes per access: 1, 2 or 4
    std::span<std::uint8_t> data;     // size * count bytes to fill
};
struct IoOut {
    std::uint16_t port;
    std::uint8_t size;
    std::span<const std::uint8_t> data;
};
struct MmioRead {
    std::uint64_t address;
    std::span<std::uint8_t> data;     // 1..8 bytes to fill
};
struct MmioWrite {
    std::uint64_t address;
    std::span<const std::uint8_t> data;
};
struct Halt {};
struct Shutdown {};                   // triple fault or similar
struct SystemEvent {
    enum class Kind { Shutdown, Reset, Crash, Other } kind;
};
struct Interrupted {};                // KVM_RUN returned EINTR (a kick, or immediate_exit)
struct FailEntry {
    std::uint64_t reason;
};
struct InternalError {
    std::uint32_t suberror;
};
struct UnhandledExit {
    std::uint32_t reason;
};
using VcpuExit = std::variant<IoIn, IoOut, MmioRead, MmioWrite, Halt, Shutdown, SystemEvent,
                              Interrupted, FailEntry, InternalError, UnhandledExit>;

[[nodiscard]] std::string describe(const VcpuExit& exit);

// The register state the VMM sets to enter a 64-bit Linux kernel
// (Linux boot protocol, "64-bit Boot Protocol").
struct LongModeEntry {
    std::uint64_t rip = 0;
    std::uint64_t rsi = 0;   // zero page (struct boot_params)
    std::uint64_t rsp = 0;
    std::uint64_t cr3 = 0;   // identity-mapped page tables
    std::uint64_t gdt_base = 0;
    std::uint16_t gdt_limit = 0;
    std::uint64_t idt_base = 0;
    std::uint16_t idt_limit = 0;
};

class Vcpu {
public:
    [[nodiscard]] std::uint32_t id() const { return id_; }
    [[nodiscard]] int fd() const { return fd_.get(); }

    // KVM_RUN once and decode why it returned.
    [[nodiscard]] Result<VcpuExit> run();
    // Makes the current or next run() return Interrupted at once. Any thread
    // may set it; pair it with a signal to kick a vCPU already in KVM_RUN.
    void set_immediate_exit(bool on);

    // Where the vCPU stopped, for the one-line reason of a fatal exit. (On
    // AMD, KVM resets the vCPU after KVM_EXIT_SHUTDOWN, so it reads 0xfff0 there.)
    [[nodiscard]] Result<std::uint64_t> instruction_pointer() const;

    // KVM_SET_CPUID2; the vCPU keeps a copy for save_state(). Call before
    // the vCPU's thread starts (as restore_state, which also sets it).
    Result<void> set_cpuid(std::span<const CpuidEntry> entries) const;
    Result<void> set_msrs(std::span<const std::pair<std::uint32_t, std::uint64_t>> msrs) const;
    // Registers, segments, FPU and LAPIC LINT pins for a 64-bit Linux entry.
    Result<void> setup_long_mode(const LongModeEntry& entry) const;
    Result<void> setup_lapic_lints() const;

    // The CPUID as KVM holds it now (KVM_GET_CPUID2). It can differ from
    // what set_cpuid() gave: KVM updates bits that mirror guest state
    // (OSXSAVE, APIC, XSAVE sizes), and PVM puts the host CPU's own feature
    // bits in leaves 1, 7 and 0xd.
    [[nodiscard]] Result<std::vector<CpuidEntry>> cpuid() const;

    // Everything KVM holds for this vCPU. It must not be inside KVM_RUN (its
    // thread parked), and for the vCPU events no other vCPU of the VM may run.
    [[nodiscard]] Result<VcpuState> save_state() const;
    // Loads a saved state into a freshly created vCPU, in the order KVM needs.
    // The guest's TSC resumes `advance_ns` (at the saved TSC frequency) past
    // its saved value: the time Vm::restore_state moved kvmclock on, so a
    // guest on the tsc clocksource sees the same time as one on kvm-clock.
    [[nodiscard]] Result<void> restore_state(const VcpuState& state, std::uint64_t advance_ns = 0) const;
    // KVM_KVMCLOCK_CTRL (api.rst 4.70): tells the guest it was paused (after a
    // pause, or a restore: call it once its kvmclock MSRs are set), so its
    // soft-lockup and RCU stall watchdogs stay quiet; EINVAL (no kvmclock in use) is fine.
    [[nodiscard]] Result<void> notify_paused() const;

private:
    friend class Vm;
    struct Props {
        std::shared_ptr<const std::vector<std::uint32_t>> msr_indices;
        std::size_t xsave_size = 0;  // KVM_CAP_XSAVE2 on the VM fd; 0: KVM_GET_XSAVE
        bool tsc_control = false;    // KVM_CAP_TSC_CONTROL: KVM_SET_TSC_KHZ works
    };
    Vcpu(std::uint32_t id, UniqueFd fd, MmapRegion run, Props props)
        : id_(id), fd_(std::move(fd)), run_(std::move(run)), props_(std::move(props)) {}
    [[nodiscard]] Result<std::vector<std::pair<std::uint32_t, std::uint64_t>>> read_msrs() const;
    std::uint32_t id_;
    UniqueFd fd_;
    MmapRegion run_;  // struct kvm_run
    Props props_;
    // What set_cpuid() last gave KVM: the CPUID a snapshot records and checks
    // against the restoring host's KVM_GET_SUPPORTED_CPUID.
    mutable std::vector<CpuidEntry> cpuid_set_;
};

}  // namespace sbx::kvm

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

namespace sbx::kvm {

// One CPUID leaf/subleaf as KVM reports and accepts it.
struct CpuidEntry {
    std::uint32_t function = 0;
    std::uint32_t index = 0;
    std::uint32_t flags = 0;  // KVM_CPUID_FLAG_*
    std::uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;

    // KVM_CPUID_FLAG_SIGNIFCANT_INDEX: `index` selects a subleaf.
    static constexpr std::uint32_t kSignificantIndex = 1;
};

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

    Result<void> set_user_memory_region(std::uint32_t slot, std::uint64_t guest_phys,
                                        std::uint64_t size, void* host) const;
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

private:
    friend class System;
    explicit Vm(UniqueFd fd) : fd_(std::move(fd)) {}
    UniqueFd fd_;
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

    Result<void> set_cpuid(std::span<const CpuidEntry> entries) const;
    Result<void> set_msrs(std::span<const std::pair<std::uint32_t, std::uint64_t>> msrs) const;
    // Registers, segments, FPU and LAPIC LINT pins for a 64-bit Linux entry.
    Result<void> setup_long_mode(const LongModeEntry& entry) const;
    Result<void> setup_lapic_lints() const;

private:
    friend class Vm;
    Vcpu(std::uint32_t id, UniqueFd fd, MmapRegion run) : id_(id), fd_(std::move(fd)), run_(std::move(run)) {}
    std::uint32_t id_;
    UniqueFd fd_;
    MmapRegion run_;  // struct kvm_run
};

}  // namespace sbx::kvm

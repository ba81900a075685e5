// Pause, resume, and the machine state of a VM (each vCPU's run state is in
// vmm/vcpu_run_states.hpp).
#include "base/log.hpp"
#include "vmm/vm.hpp"

namespace sbx {

namespace {

// How long pause() waits for every vCPU to park. A vCPU returns from
// KVM_RUN at once on a kick; only a wedged host would take this long.
constexpr std::chrono::milliseconds kParkTimeout{10'000};

}  // namespace

bool Vm::paused() const {
    std::lock_guard lock(control_mutex_);
    return paused_;
}

Result<void> Vm::pause() {
    std::lock_guard lock(control_mutex_);
    if (paused_) {
        return ok();
    }
    if (!running_ || m_->exits->requested()) {
        return make_coded_error("vm_not_running", "the VM is not running");
    }
    if (auto r = run_states_.pause([this] { kick_vcpus(); }, kParkTimeout); !r) {
        return r;
    }
    for (const auto& vcpu : m_->vcpus) {
        if (auto r = vcpu.notify_paused(); !r) {
            log::warn("vCPU {}: {}", vcpu.id(), r.error().to_string());
        }
    }
    stop_device_thread();
    paused_ = true;
    for (const auto& transport : m_->virtio_devices) {
        if (auto r = transport->quiesce(); !r) {
            return r.error().context(transport->device().name());
        }
    }
    return ok();
}

Result<void> Vm::resume() {
    std::lock_guard lock(control_mutex_);
    if (!paused_) {
        return ok();
    }
    if (!running_ || m_->exits->requested()) {
        return make_coded_error("vm_not_running", "the VM is exiting");
    }
    start_device_thread();
    paused_ = false;
    run_states_.resume();
    return ok();
}

Result<void> Vm::start_dirty_tracking() {
    std::uint32_t slot = 0;
    for (const auto& region : m_->memory.regions()) {
        if (auto r = m_->kvm_vm.set_user_memory_region(slot++, region.start.value, region.size(), region.mapping.data(),
                                                    true);
            !r) {
            return r.error();
        }
    }
    return ok();
}

Result<std::vector<MemoryRegionSpec>> Vm::stop_dirty_tracking() {
    constexpr std::uint64_t kPage = 4096;
    std::vector<MemoryRegionSpec> ranges;
    std::uint32_t slot = 0;
    for (const auto& region : m_->memory.regions()) {
        auto bitmap = m_->kvm_vm.get_dirty_log(slot, region.size());
        if (auto r = m_->kvm_vm.set_user_memory_region(slot, region.start.value, region.size(), region.mapping.data());
            !r) {
            return r.error();
        }
        ++slot;
        if (!bitmap) {
            return bitmap.error();
        }
        const std::uint64_t pages = region.size() / kPage;
        for (std::uint64_t page = 0; page < pages; ++page) {
            if ((((*bitmap)[page / 64] >> (page % 64)) & 1) == 0) {
                continue;
            }
            GuestAddress addr = region.start + page * kPage;
            if (!ranges.empty() && ranges.back().start.value + ranges.back().size == addr.value) {
                ranges.back().size += kPage;
            } else {
                ranges.push_back({addr, kPage});
            }
        }
    }
    return ranges;
}

Result<MachineState> Vm::save_state() const {
    std::lock_guard lock(control_mutex_);
    if (!paused_) {
        return make_coded_error("vm_not_paused", "pause the VM before saving its state");
    }
    MachineState state;
    for (const auto& vcpu : m_->vcpus) {
        auto saved = vcpu.save_state();
        if (!saved) {
            return saved.error().context(fmt::format("vCPU {}", vcpu.id()));
        }
        state.vcpus.push_back(std::move(*saved));
    }
    auto vm_state = m_->kvm_vm.save_state();
    if (!vm_state) {
        return vm_state.error();
    }
    state.vm = std::move(*vm_state);
    state.serial = m_->serial->save();
    state.i8042 = m_->i8042->save();
    for (const auto& transport : m_->virtio_devices) {
        state.virtio.push_back(transport->save_state());
    }
    return state;
}

void Vm::open_stats() {
    auto open = [](int fd, std::string_view what) -> std::optional<kvm::KvmStats> {
        auto stats = kvm::KvmStats::open(fd);
        if (!stats) {
            log::warn("{}: no KVM counters: {}", what, stats.error().to_string());
            return std::nullopt;
        }
        return std::move(*stats);
    };
    for (const auto& vcpu : m_->vcpus) {
        vcpu_stats_.push_back(open(vcpu.fd(), fmt::format("vCPU {}", vcpu.id())));
    }
    vm_stats_ = open(m_->kvm_vm.fd(), "VM");
}

Result<VmDiagnosis> Vm::diagnose() {
    VmDiagnosis d;
    // Counters first: pausing itself makes every vCPU exit. Reading them
    // takes no vCPU lock, so they come back even from a vCPU stuck in KVM_RUN.
    auto read = [](const std::optional<kvm::KvmStats>& stats) {
        auto counters = stats ? stats->read() : Result<VmDiagnosis::Counters>(VmDiagnosis::Counters{});
        return counters ? std::move(*counters) : VmDiagnosis::Counters{};
    };
    for (const auto& stats : vcpu_stats_) {
        d.vcpu_stats.push_back(read(stats));
    }
    d.vm_stats = read(vm_stats_);
    d.was_paused = paused();
    bool stopped = d.was_paused;
    if (!stopped) {
        if (auto r = pause(); r) {
            stopped = true;
        } else {
            d.vcpus_unavailable = r.error().to_string();
        }
    }
    // The chips and the clock are VM ioctls (kvm->lock, not a vCPU's mutex).
    auto vm_state = m_->kvm_vm.save_state();
    if (stopped) {
        for (std::size_t i = 0; i < m_->vcpus.size(); ++i) {
            auto state = m_->vcpus[i].save_state();
            auto vcpu = state ? kvm::diagnose_vcpu(static_cast<std::uint32_t>(i), *state)
                              : Result<kvm::VcpuDiagnosis>(state.error().context(fmt::format("vCPU {}", i)));
            if (!vcpu) {
                d.vcpus_unavailable = vcpu.error().to_string();
                d.vcpus.clear();
                break;
            }
            d.vcpus.push_back(std::move(*vcpu));
        }
    }
    constexpr std::uint64_t kEferLma = 1ULL << 10, kCr4La57 = 1ULL << 12;
    for (const auto& v : d.vcpus) {
        d.rip_walks.push_back((v.efer & kEferLma) != 0
                                  ? std::optional(walk_long_mode(m_->memory, v.cr3, (v.cr4 & kCr4La57) != 0, v.rip))
                                  : std::nullopt);
    }
    d.serial = m_->serial->save();
    if (stopped && !d.was_paused) {
        if (auto r = resume(); !r) {
            return r.error();
        }
    }
    if (!vm_state) {
        return vm_state.error();
    }
    auto chips = kvm::diagnose_chips(*vm_state);
    if (!chips) {
        return chips.error();
    }
    d.chips = std::move(*chips);
    return d;
}

Result<void> Vm::restore_state(const MachineState& state) {
    if (state.vcpus.size() != m_->vcpus.size()) {
        return make_coded_error("config_mismatch", "the snapshot has {} vCPUs, this VM {}",
                                state.vcpus.size(), m_->vcpus.size());
    }
    if (state.virtio.size() != m_->virtio_devices.size()) {
        return make_coded_error("config_mismatch", "the snapshot has {} virtio devices, this VM {}",
                                state.virtio.size(), m_->virtio_devices.size());
    }
    // VM-wide chips first (the IOAPIC routes what the LAPICs then receive),
    // then each vCPU, then the devices that may raise interrupts.
    // The guest's clocks move on by the time the snapshot spent on disk, so
    // its wall clock is the host's (each fork of one file gets its own
    // "now"); then each vCPU's kvmclock says the guest was stopped.
    auto advanced = m_->kvm_vm.restore_state(state.vm, kvm::ClockRestore::AdvanceByRealtime);
    if (!advanced) {
        return advanced.error();
    }
    for (std::size_t i = 0; i < m_->vcpus.size(); ++i) {
        if (auto r = m_->vcpus[i].restore_state(state.vcpus[i], *advanced); !r) {
            return r.error().context(fmt::format("vCPU {}", i));
        }
    }
    for (const auto& vcpu : m_->vcpus) {
        if (auto r = vcpu.notify_paused(); !r) {
            log::warn("vCPU {}: {}", vcpu.id(), r.error().to_string());
        }
    }
    log::info("guest clock advanced {:.3f} s past the snapshot", static_cast<double>(*advanced) / 1e9);
    if (auto r = m_->serial->restore(state.serial); !r) {
        return r.error().context("serial");
    }
    if (auto r = m_->i8042->restore(state.i8042); !r) {
        return r.error().context("i8042");
    }
    for (std::size_t i = 0; i < m_->virtio_devices.size(); ++i) {
        if (auto r = m_->virtio_devices[i]->restore_state(state.virtio[i]); !r) {
            return r.error().context(m_->virtio_devices[i]->device().name());
        }
    }
    return ok();
}

}  // namespace sbx

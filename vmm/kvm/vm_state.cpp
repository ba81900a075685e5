// VM-wide state: the in-kernel PICs and IOAPIC (api.rst 4.26/4.27
// KVM_GET/SET_IRQCHIP), the PIT (KVM_GET/SET_PIT2) and kvmclock (4.29/4.30
// KVM_GET/SET_CLOCK).
#include <sys/ioctl.h>

#include <cstring>
#include <ctime>

#include "vmm/kvm/kvm.hpp"
#include "vmm/kvm/linux_kvm.hpp"
#include "vmm/kvm/state_image.hpp"

namespace sbx::kvm {

namespace {

constexpr const char* chip_name(std::uint32_t id) {
    return id == KVM_IRQCHIP_PIC_MASTER ? "PIC master" : id == KVM_IRQCHIP_PIC_SLAVE ? "PIC slave" : "IOAPIC";
}

// CLOCK_REALTIME in nanoseconds, the clock KVM_CLOCK_REALTIME is in.
std::uint64_t realtime_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

Result<VmState> Vm::save_state() const {
    VmState s;
    std::vector<std::uint8_t>* chips[] = {&s.pic_master, &s.pic_slave, &s.ioapic};
    for (std::uint32_t id : {KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE, KVM_IRQCHIP_IOAPIC}) {
        kvm_irqchip chip{};
        chip.chip_id = id;
        if (::ioctl(fd_.get(), KVM_GET_IRQCHIP, &chip) < 0) {
            return sys_error("KVM_GET_IRQCHIP ({})", chip_name(id));
        }
        *chips[id] = image_of(chip);
    }
    kvm_pit_state2 pit{};
    if (::ioctl(fd_.get(), KVM_GET_PIT2, &pit) < 0) {
        return sys_error("KVM_GET_PIT2");
    }
    s.pit2 = image_of(pit);
    kvm_clock_data clock{};
    if (::ioctl(fd_.get(), KVM_GET_CLOCK, &clock) < 0) {
        return sys_error("KVM_GET_CLOCK");
    }
    // KVM pairs the clock with the host's real time only on a TSC-based host
    // clock (api.rst 4.29, kernel 5.16+); otherwise pair it here, a few
    // microseconds later, so a restore can always advance by the time passed.
    if ((clock.flags & KVM_CLOCK_REALTIME) == 0) {
        clock.realtime = realtime_ns();
        clock.flags |= KVM_CLOCK_REALTIME;
    }
    s.clock = image_of(clock);
    return s;
}

Result<std::uint64_t> Vm::restore_state(const VmState& s, ClockRestore mode) const {
    auto clock = from_image<kvm_clock_data>(s.clock, "KVM_SET_CLOCK");
    auto pit = from_image<kvm_pit_state2>(s.pit2, "KVM_SET_PIT2");
    auto master = from_image<kvm_irqchip>(s.pic_master, "KVM_SET_IRQCHIP (PIC master)");
    auto slave = from_image<kvm_irqchip>(s.pic_slave, "KVM_SET_IRQCHIP (PIC slave)");
    auto ioapic = from_image<kvm_irqchip>(s.ioapic, "KVM_SET_IRQCHIP (IOAPIC)");
    if (const Error* e = first_error(clock, pit, master, slave, ioapic)) {
        return *e;
    }
    const std::pair<kvm_irqchip*, std::uint32_t> chips[] = {
        {&*master, KVM_IRQCHIP_PIC_MASTER}, {&*slave, KVM_IRQCHIP_PIC_SLAVE}, {&*ioapic, KVM_IRQCHIP_IOAPIC}};
    for (const auto& [chip, id] : chips) {
        if (chip->chip_id != id) {
            return make_error("KVM_SET_IRQCHIP: saved {} image has chip id {}", chip_name(id), chip->chip_id);
        }
    }

    // api.rst 4.30: KVM_SET_CLOCK acts on KVM_CLOCK_REALTIME only (other flags
    // KVM_GET_CLOCK returned are ignored, and kernels before 5.16 refuse any
    // flag), so pass that one alone and only when asked and usable: the image
    // has a real time and KVM_CAP_ADJUST_CLOCK says this host takes it. KVM
    // then adds the real time elapsed since; without it, add it here.
    kvm_clock_data set_clock{};
    set_clock.clock = clock->clock;
    std::uint64_t advance = 0;
    if (mode == ClockRestore::AdvanceByRealtime && (clock->flags & KVM_CLOCK_REALTIME) != 0) {
        const std::uint64_t now = realtime_ns();
        advance = now > clock->realtime ? now - clock->realtime : 0;  // a host clock set back: no advance
        int caps = ::ioctl(fd_.get(), KVM_CHECK_EXTENSION, KVM_CAP_ADJUST_CLOCK);
        if (caps > 0 && (static_cast<unsigned>(caps) & KVM_CLOCK_REALTIME) != 0) {
            set_clock.flags = KVM_CLOCK_REALTIME;
            set_clock.realtime = clock->realtime;
        } else {
            set_clock.clock += advance;
        }
    }
    if (::ioctl(fd_.get(), KVM_SET_CLOCK, &set_clock) < 0) {
        return sys_error("KVM_SET_CLOCK");
    }
    if (::ioctl(fd_.get(), KVM_SET_PIT2, &*pit) < 0) {
        return sys_error("KVM_SET_PIT2");
    }
    for (const auto& [chip, id] : chips) {
        if (::ioctl(fd_.get(), KVM_SET_IRQCHIP, chip) < 0) {
            return sys_error("KVM_SET_IRQCHIP ({})", chip_name(id));
        }
    }
    return advance;
}

}  // namespace sbx::kvm

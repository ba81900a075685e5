#include "vmm/vm.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "base/log.hpp"

namespace sbx {

namespace {

// The signal that kicks a vCPU thread out of KVM_RUN. Its handler does
// nothing: the point is the EINTR, with immediate_exit set beforehand so a
// thread that was not in KVM_RUN yet returns at once too.
int kick_signal() { return SIGRTMIN; }

void install_kick_handler() {
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: KVM_RUN must return EINTR
    ::sigaction(kick_signal(), &sa, nullptr);
}

template <class... Ts>
struct Overloaded : Ts... {
    using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// How long the exit path keeps writing buffered console output to a slow reader.
constexpr std::chrono::milliseconds kExitDrain{1000};

}  // namespace

Vm::Vm(std::unique_ptr<Machine> machine, Clock::time_point start)
    : m_(std::move(machine)), start_(start), run_states_(m_->vcpus.size()) {
    open_stats();
}

Vm::~Vm() {
    stop_vcpus();
    stop_device_thread();
}

void Vm::request_exit(VmExit exit) { m_->exits->request(std::move(exit)); }

VmExit Vm::run() {
    install_kick_handler();
    m_->mmio_bus.freeze();
    m_->pio_bus.freeze();
    auto setup = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_);
    log::info("VM set up in {}.{:03} ms; starting {} vCPU(s)", setup.count() / 1000, setup.count() % 1000,
              m_->vcpus.size());
    start_device_thread();
    for (std::size_t i = 0; i < m_->vcpus.size(); ++i) {
        threads_.emplace_back([this, i] {
            start_thread_as(ThreadClass::Vcpu, static_cast<unsigned>(i), thread_hook_);
            vcpu_loop(m_->vcpus[i], i);
        });
    }
    start_thread_as(ThreadClass::Main, 0, thread_hook_);
    {
        std::lock_guard lock(control_mutex_);
        running_ = true;
    }
    run_loop();
    {
        std::lock_guard lock(control_mutex_);
        running_ = false;
    }
    stop_vcpus();
    stop_device_thread();
    m_->console->drain(kExitDrain);
    if (auto dropped = m_->serial->dropped_output_bytes(); dropped > 0) {
        log::warn("the console reader fell behind: {} bytes of guest console output dropped", dropped);
    }
    return *m_->exits->exit();
}

void Vm::run_loop() {
    EventLoop& loop = *m_->run_loop;
    auto watched = loop.add(m_->exits->fd(), EPOLLIN, [&loop](std::uint32_t) { loop.stop(); });
    if (!watched) {
        request_exit({ExitReason::VmmError, watched.error().context("run loop").to_string()});
        return;
    }
    if (auto r = m_->console->attach(*m_->serial, loop); !r) {
        request_exit({ExitReason::VmmError, r.error().to_string()});
        return;
    }
    if (auto r = loop.run(); !r) {
        request_exit({ExitReason::VmmError, r.error().context("run loop").to_string()});
    }
}

void Vm::stop_vcpus() {
    run_states_.stop();
    // A vCPU may be inside a device reset waiting for its backend.
    for (auto& device : m_->virtio_devices) {
        device->stop_waiting();
    }
    kick_vcpus();
    for (auto& t : threads_) {
        if (t.joinable()) {
            t.join();
        }
    }
    threads_.clear();
}

void Vm::kick_vcpus() {
    for (std::size_t i = 0; i < threads_.size(); ++i) {
        m_->vcpus[i].set_immediate_exit(true);
        ::pthread_kill(threads_[i].native_handle(), kick_signal());
    }
}

void Vm::start_device_thread() {
    if (m_->virtio_devices.empty()) {
        return;
    }
    device_thread_ = std::thread([this] {
        start_thread_as(ThreadClass::Device, 0, thread_hook_);
        if (auto r = m_->device_loop->run(); !r) {
            request_exit({ExitReason::VmmError, r.error().context("device event loop").to_string()});
        }
    });
}

void Vm::stop_device_thread() {
    if (device_thread_.joinable()) {
        m_->device_loop->stop();
        device_thread_.join();
    }
}

void Vm::vcpu_loop(kvm::Vcpu& vcpu, std::size_t index) {
    // Threads inherit the creator's mask; an embedder that blocks our kick
    // signal would make this vCPU impossible to stop.
    sigset_t kick;
    sigemptyset(&kick);
    sigaddset(&kick, kick_signal());
    ::pthread_sigmask(SIG_UNBLOCK, &kick, nullptr);
    while (!run_states_.stopping() && !m_->exits->requested()) {
        auto exit = vcpu.run();
        if (!exit) {
            request_exit({ExitReason::VmmError, exit.error().to_string()});
            break;
        }
        if (std::holds_alternative<kvm::Interrupted>(*exit) && run_states_.pause_requested()) {
            if (!run_states_.park(index)) {
                break;
            }
            continue;
        }
        if (!handle_exit(vcpu, *exit)) {
            break;
        }
    }
    run_states_.exited(index);
}

// Returns false when the vCPU must stop running.
bool Vm::handle_exit(const kvm::Vcpu& vcpu, const kvm::VcpuExit& exit) {
    return std::visit(
        Overloaded{
            [&](const kvm::IoIn& io) {
                for (std::size_t off = 0; off < io.data.size(); off += io.size) {
                    m_->pio_bus.read(io.port, io.data.subspan(off, io.size));
                }
                return true;
            },
            [&](const kvm::IoOut& io) {
                for (std::size_t off = 0; off < io.data.size(); off += io.size) {
                    m_->pio_bus.write(io.port, io.data.subspan(off, io.size));
                }
                return true;
            },
            [&](const kvm::MmioRead& m) {
                m_->mmio_bus.read(m.address, m.data);
                return true;
            },
            [&](const kvm::MmioWrite& m) {
                m_->mmio_bus.write(m.address, m.data);
                return true;
            },
            [&](const kvm::Halt&) { return true; },
            [&](const kvm::Interrupted&) { return true; },
            [&](const kvm::Shutdown&) {
                // No rip here: KVM on AMD has already reset the vCPU's state.
                request_exit({ExitReason::TripleFault,
                              fmt::format("guest triple fault (KVM_EXIT_SHUTDOWN) on vCPU {}", vcpu.id())});
                return false;
            },
            [&](const kvm::SystemEvent& e) {
                if (e.kind == kvm::SystemEvent::Kind::Reset) {
                    request_exit({ExitReason::Reboot, "guest reset"});
                } else if (e.kind == kvm::SystemEvent::Kind::Shutdown) {
                    request_exit({ExitReason::PowerOff, "guest powered off"});
                } else {
                    request_exit({ExitReason::KvmError, kvm::describe(exit)});
                }
                return false;
            },
            [&](const auto&) {
                auto rip = vcpu.instruction_pointer();
                request_exit({ExitReason::KvmError,
                              rip ? fmt::format("{} on vCPU {} at rip {:#x}", kvm::describe(exit), vcpu.id(), *rip)
                                  : fmt::format("{} on vCPU {}", kvm::describe(exit), vcpu.id())});
                return false;
            },
        },
        exit);
}

}  // namespace sbx

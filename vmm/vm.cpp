#include "vmm/vm.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <array>

#include "base/epoll.hpp"
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

constexpr std::uint64_t kTokenExit = 1;
constexpr std::uint64_t kTokenConsoleIn = 2;
constexpr std::uint64_t kTokenConsoleReady = 3;
constexpr std::uint64_t kTokenConsoleWritable = 4;
constexpr std::size_t kMaxPendingInput = 4096;
// How long the exit path keeps writing buffered console output to a slow reader.
constexpr int kExitDrainMs = 1000;

}  // namespace

int exit_code(ExitReason reason) {
    switch (reason) {
        case ExitReason::Reboot:
        case ExitReason::PowerOff:
        case ExitReason::Stopped: return 0;
        case ExitReason::TripleFault: return 2;
        case ExitReason::KvmError: return 3;
        case ExitReason::VmmError: return 4;
        case ExitReason::Panic: return 5;
    }
    return 4;
}

const char* to_string(ExitReason reason) {
    switch (reason) {
        case ExitReason::Reboot: return "reboot";
        case ExitReason::PowerOff: return "poweroff";
        case ExitReason::Panic: return "panic";
        case ExitReason::TripleFault: return "triple-fault";
        case ExitReason::KvmError: return "kvm-error";
        case ExitReason::VmmError: return "vmm-error";
        case ExitReason::Stopped: return "stopped";
    }
    return "unknown";
}

Vm::Vm(kvm::System system, kvm::Vm vm, GuestMemory memory, EventFd exit_event, EventFd console_ready)
    : system_(std::move(system)),
      kvm_vm_(std::move(vm)),
      memory_(std::move(memory)),
      exit_event_(std::move(exit_event)),
      console_ready_(std::move(console_ready)) {}

Vm::~Vm() {
    stop_vcpus();
    stop_device_thread();
}

void Vm::request_exit(VmExit exit) {
    {
        std::lock_guard lock(exit_mutex_);
        if (!exit_) {
            exit_ = std::move(exit);
        }
    }
    stopping_ = true;
    [[maybe_unused]] auto r = exit_event_.signal();
}

VmExit Vm::run() {
    install_kick_handler();
    mmio_bus_.freeze();
    pio_bus_.freeze();
    auto setup = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_);
    log::info("VM set up in {}.{:03} ms; starting {} vCPU(s)", setup.count() / 1000, setup.count() % 1000,
              vcpus_.size());
    start_device_thread();
    for (auto& vcpu : vcpus_) {
        threads_.emplace_back([this, &vcpu] { vcpu_loop(vcpu); });
    }
    {
        std::lock_guard lock(run_state_mutex_);
        running_ = true;
    }
    event_loop();
    {
        std::lock_guard lock(run_state_mutex_);
        running_ = false;
    }
    stop_vcpus();
    stop_device_thread();
    drain_console_at_exit();
    if (auto dropped = serial_->dropped_output_bytes(); dropped > 0) {
        log::warn("the console reader fell behind: {} bytes of guest console output dropped", dropped);
    }
    std::lock_guard lock(exit_mutex_);
    return *exit_;
}

void Vm::stop_vcpus() {
    stopping_ = true;
    // A vCPU may be inside a device reset waiting for its backend.
    for (auto& device : virtio_devices_) {
        device->stop_waiting();
    }
    {
        // Parked vCPUs wait on this; taking the lock orders the wake-up after their check.
        std::lock_guard lock(run_state_mutex_);
    }
    run_state_changed_.notify_all();
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
        vcpus_[i].set_immediate_exit(true);
        ::pthread_kill(threads_[i].native_handle(), kick_signal());
    }
}

void Vm::start_device_thread() {
    if (virtio_devices_.empty()) {
        return;
    }
    device_thread_ = std::thread([this] {
        if (auto r = device_loop_->run(); !r) {
            request_exit({ExitReason::VmmError, r.error().context("device event loop").to_string()});
        }
    });
}

void Vm::stop_device_thread() {
    if (device_thread_.joinable()) {
        device_loop_->stop();
        device_thread_.join();
    }
}

void Vm::vcpu_loop(kvm::Vcpu& vcpu) {
    // Threads inherit the creator's mask; an embedder that blocks our kick
    // signal would make this vCPU impossible to stop.
    sigset_t kick;
    sigemptyset(&kick);
    sigaddset(&kick, kick_signal());
    ::pthread_sigmask(SIG_UNBLOCK, &kick, nullptr);
    while (!stopping_) {
        auto exit = vcpu.run();
        if (!exit) {
            request_exit({ExitReason::VmmError, exit.error().to_string()});
            return;
        }
        // Parking only after an EINTR means any I/O exit before it has been
        // completed by that KVM_RUN, so the saved state is consistent.
        if (std::holds_alternative<kvm::Interrupted>(*exit) && pause_requested_) {
            park_vcpu();
            continue;
        }
        if (!handle_exit(vcpu, *exit)) {
            return;
        }
    }
}

// Returns false when the vCPU must stop running.
bool Vm::handle_exit(const kvm::Vcpu& vcpu, const kvm::VcpuExit& exit) {
    return std::visit(
        Overloaded{
            [&](const kvm::IoIn& io) {
                for (std::size_t off = 0; off < io.data.size(); off += io.size) {
                    pio_bus_.read(io.port, io.data.subspan(off, io.size));
                }
                return true;
            },
            [&](const kvm::IoOut& io) {
                for (std::size_t off = 0; off < io.data.size(); off += io.size) {
                    pio_bus_.write(io.port, io.data.subspan(off, io.size));
                }
                return true;
            },
            [&](const kvm::MmioRead& m) {
                mmio_bus_.read(m.address, m.data);
                return true;
            },
            [&](const kvm::MmioWrite& m) {
                mmio_bus_.write(m.address, m.data);
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

void Vm::event_loop() {
    auto epoll = Epoll::create();
    if (!epoll || !epoll->add(exit_event_.fd(), EPOLLIN, kTokenExit) ||
        !epoll->add(console_ready_.fd(), EPOLLIN, kTokenConsoleReady)) {
        request_exit({ExitReason::VmmError, "cannot create the event loop"});
        return;
    }
    // Console input waits in `pending_in` until the guest's UART FIFO has
    // room; while it is full the fd leaves the epoll set, so nothing is
    // dropped. Output that the reader cannot take yet waits for EPOLLOUT.
    const int in_fd = console_.input_fd();
    bool input_open = in_fd >= 0 && epoll->add(in_fd, EPOLLIN, kTokenConsoleIn).has_value();
    bool input_watched = input_open;
    bool output_watched = false;
    std::string pending_in;
    std::array<Epoll::Event, 8> events{};
    while (!stopping_) {
        // Input waiting for FIFO room is retried on a short tick; otherwise
        // the loop sleeps until something happens.
        auto n = epoll->wait(events, pending_in.empty() ? -1 : 10);
        if (!n) {
            request_exit({ExitReason::VmmError, n.error().to_string()});
            break;
        }
        for (std::size_t i = 0; i < *n; ++i) {
            if (events[i].token == kTokenConsoleReady) {
                [[maybe_unused]] auto r = console_ready_.consume();
            } else if (events[i].token == kTokenConsoleIn) {
                std::array<char, 512> buf{};
                ssize_t got = ::read(in_fd, buf.data(), buf.size());
                if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
                    continue;
                }
                if (got <= 0) {  // EOF or a real error: no more input for the guest
                    [[maybe_unused]] auto r = epoll->remove(in_fd);
                    input_open = input_watched = false;
                    continue;
                }
                pending_in.append(buf.data(), static_cast<std::size_t>(got));
            }
        }
        if (!pending_in.empty()) {
            auto taken = serial_->enqueue_input(
                std::span(reinterpret_cast<const std::uint8_t*>(pending_in.data()), pending_in.size()));
            pending_in.erase(0, taken);
        }
        bool want_input = input_open && pending_in.size() < kMaxPendingInput;
        if (want_input != input_watched) {
            input_watched = want_input;
            [[maybe_unused]] auto r = want_input ? epoll->add(in_fd, EPOLLIN, kTokenConsoleIn) : epoll->remove(in_fd);
        }
        bool want_writable = pump_console_output() && console_.pollable_output_fd() >= 0;
        if (want_writable != output_watched) {
            output_watched = want_writable;
            int out_fd = console_.pollable_output_fd();
            [[maybe_unused]] auto r = want_writable ? epoll->add(out_fd, EPOLLOUT, kTokenConsoleWritable)
                                                    : epoll->remove(out_fd);
        }
    }
}

bool Vm::pump_console_output() {
    if (console_pending_.empty()) {
        serial_->take_output(console_pending_);
    }
    while (!console_pending_.empty()) {
        std::size_t written = console_.write_some(console_pending_);
        console_pending_.erase(0, written);
        if (!console_pending_.empty()) {
            return true;  // the reader is full; wait for EPOLLOUT
        }
        serial_->take_output(console_pending_);
    }
    return false;
}

void Vm::drain_console_at_exit() {
    auto deadline = Clock::now() + std::chrono::milliseconds(kExitDrainMs);
    while (pump_console_output() && Clock::now() < deadline) {
        int fd = console_.pollable_output_fd();
        if (fd < 0) {
            break;
        }
        auto epoll = Epoll::create();
        Epoll::Event ev[1];
        if (!epoll || !epoll->add(fd, EPOLLOUT, 0) || !epoll->wait(ev, 100)) {
            break;
        }
    }
}

}  // namespace sbx

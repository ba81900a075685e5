// sbx-vmm: one microVM per process, a thin main over libsbxvmm and
// snapshot/: boot from a kernel, or restore from a snapshot; optionally
// serve the control socket (docs/vmm-control.md).
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "host-tools/sbx-vmm/crash_dump.hpp"
#include "snapshot/vm_snapshot.hpp"
#include "host-tools/sbx-vmm/control_api.hpp"
#include "host-tools/sbx-vmm/control_request.hpp"
#include "host-tools/sbx-vmm/control_server.hpp"
#include "host-tools/sbx-vmm/process_confinement.hpp"
#include "host-tools/sbx-vmm/jail.hpp"
#include "host-tools/sbx-vmm/seccomp_policy.hpp"
#include "host-tools/sbx-vmm/stop_signals.hpp"
#include "vmm/vm_builder.hpp"

namespace {

constexpr int kExitConfigError = 1;
constexpr std::size_t kMaxConfigBytes = 1 << 20;

// The command line, before it becomes a VmConfig.
struct Flags {
    std::string config_path, kernel, initrd, cmdline, console, kvm_device, net, vsock;
    std::vector<std::string> disks;
    unsigned cpus = 0, max_cpus = 0;
    std::uint64_t memory = 0, max_memory = 0, console_max_bytes = 0;
    bool cpus_set = false, memory_set = false, rng = false, console_max_set = false;
};

template <typename T, typename Parse>
sbx::Result<void> parse_into(const std::string& flag, const std::string& spec, Parse parse, T& out) {
    auto parsed = parse(spec);
    if (!parsed) {
        return parsed.error().context(flag);
    }
    out = *parsed;
    return sbx::ok();
}

// Overlays the flags on `config`.
sbx::Result<void> apply_flags(const Flags& f, sbx::VmConfig& config) {
    if (!f.config_path.empty()) {
        auto text = sbx::read_file(f.config_path, kMaxConfigBytes);
        if (!text) {
            return text.error();
        }
        if (auto r = config.merge_toml(*text, f.config_path); !r) {
            return r.error();
        }
    }
    if (!f.kernel.empty()) config.kernel = f.kernel;
    if (!f.initrd.empty()) config.initrd = f.initrd;
    if (!f.cmdline.empty()) config.cmdline = f.cmdline;
    if (f.cpus_set) config.cpus = f.cpus;
    if (f.memory_set) config.memory_mib = f.memory;
    if (!f.kvm_device.empty()) config.kvm_device = f.kvm_device;
    if (!f.console.empty()) {
        const auto max_bytes = config.console.max_bytes;  // [console] max_bytes stays
        if (auto r = parse_into("--console", f.console, sbx::ConsoleConfig::parse, config.console); !r) {
            return r;
        }
        config.console.max_bytes = max_bytes;
    }
    if (f.console_max_set) {
        config.console.max_bytes = f.console_max_bytes;
    }
    for (const auto& spec : f.disks) {
        sbx::DiskConfig disk;
        if (auto r = parse_into("--disk", spec, sbx::DiskConfig::parse, disk); !r) {
            return r;
        }
        config.disks.push_back(disk);
    }
    if (!f.net.empty()) {
        sbx::NetConfig net;
        if (auto r = parse_into("--net", f.net, sbx::NetConfig::parse, net); !r) {
            return r;
        }
        config.net = net;
    }
    if (!f.vsock.empty()) {
        sbx::VsockConfig vsock;
        if (auto r = parse_into("--vsock", f.vsock, sbx::VsockConfig::parse, vsock); !r) {
            return r;
        }
        config.vsock = vsock;
    }
    if (f.rng) {
        config.rng = true;
    }
    return sbx::ok();
}

struct Restore {
    std::string path;
    std::string mode = "eager";
};

sbx::Result<sbx::snapshot::RestoredVm> restore_vm(const Flags& flags, const Restore& restore,
                                                  sbx::Vm::Clock::time_point start,
                                                  const sbx::ThreadStartHook& thread_hook) {
    if (!flags.kernel.empty() || !flags.initrd.empty() || !flags.cmdline.empty()) {
        return sbx::make_error("--kernel, --initrd and --cmdline do not apply to --restore (the guest is already running)");
    }
    if (flags.rng) {
        return sbx::make_error("--rng does not apply to --restore (a saved virtio-rng, which has no host side, is kept)");
    }
    // The host side comes from the same flags (and --config keys) as a
    // boot's; the snapshot's own device list only says what must be given.
    sbx::VmConfig host;
    if (auto r = apply_flags(flags, host); !r) {
        return r.error();
    }
    sbx::snapshot::RestoreOptions options;
    options.host.console = host.console;
    options.host.kvm_device = host.kvm_device;
    options.host.disks = host.disks;
    options.host.net = host.net;
    options.host.vsock = host.vsock;
    if (flags.cpus_set) options.host.cpus = flags.cpus;
    if (flags.memory_set) options.host.memory_mib = flags.memory;
    options.host.max_cpus = flags.max_cpus;
    options.host.max_memory_mib = flags.max_memory;
    options.start = start;
    options.thread_hook = thread_hook;
    if (restore.mode == "lazy") {
        options.mode = sbx::snapshot::RestoreMode::Lazy;
    } else if (restore.mode == "private") {
        options.mode = sbx::snapshot::RestoreMode::Private;
    } else if (restore.mode != "eager") {
        return sbx::make_error("--restore-mode is eager, lazy or private, not {}", restore.mode);
    }
    auto restored = sbx::snapshot::restore_vm(restore.path, options);
    if (!restored) {
        return restored.error();
    }
    sbx::log::info("restored {} ({} mode{})", restore.path, restore.mode,
                   restore.mode == "eager"
                       ? fmt::format(", {} MiB of memory loaded in {:.1f} ms", restored->config.memory_mib,
                                     restored->memory_seconds * 1000)
                       : std::string());
    return restored;
}

// An error for the log, led by its code when it has one
// ("config_mismatch: the snapshot has 2 vCPUs, ...").
std::string describe(const sbx::Error& error) {
    return error.code.empty() ? error.to_string() : fmt::format("{}: {}", error.code, error.to_string());
}

// How a lazily restored VM's memory loaded, for the log.
void log_lazy_stats(const sbx::snapshot::LazyMemory& lazy) {
    auto stats = lazy.stats();
    sbx::log::info("lazy restore: {} faults, {} of {} chunks installed by a fault first, fully loaded {}",
                   stats.faults, stats.chunks_by_fault, stats.chunks_total,
                   stats.fully_loaded ? fmt::format("after {:.1f} ms", static_cast<double>(stats.fully_loaded->count()) / 1000)
                                      : std::string("never"));
}

// The paths a jailed VMM still uses once inside: where snapshots go, the
// vsock sockets it connects to for guest connections, and its control
// socket (removed at exit).
sbx::Result<void> check_jail_paths(const sbx::JailSpec& jail, const std::string& control,
                                   const sbx::ControlOptions& options, const sbx::VmConfig& config) {
    if (!options.snapshot_dir.empty()) {
        if (auto r = sbx::check_inside_jail(jail, "--snapshot-dir", options.snapshot_dir); !r) {
            return r;
        }
    }
    if (config.vsock) {
        if (auto r = sbx::check_inside_jail(jail, "--vsock uds", config.vsock->uds); !r) {
            return r;
        }
    }
    if (!control.empty()) {
        return sbx::check_inside_jail(jail, "--control", control);
    }
    return sbx::ok();
}

// Capabilities are per thread (capset(2), PR_CAPBSET_DROP): a thread
// started before the main thread drops its own (the control server's,
// lazy restore's) would keep them, so every thread started by an
// unfiltered thread drops its own first thing (one started by a filtered
// thread inherited that thread's filter and its empty sets), then loads
// its seccomp filter when there is one. With a jail still to enter, it
// keeps what taking the jail's ids needs; taking them clears the rest.
sbx::ThreadStartHook confine_each_thread(sbx::ThreadStartHook seccomp, bool jailed) {
    return [seccomp = std::move(seccomp), jailed](sbx::ThreadClass c, unsigned index) {
        if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 0) {
            if (auto r = sbx::drop_capabilities(jailed ? sbx::jail_id_capabilities() : 0); !r) {
                sbx::log::error("exit: {}", describe(r.error()));
                std::_Exit(sbx::exit_code(sbx::ExitReason::VmmError));
            }
        }
        if (seccomp) {
            seccomp(c, index);
        }
    };
}

}  // namespace

int main(int argc, char** argv) {
    const auto start = sbx::Vm::Clock::now();
    // Before anything is opened: no inherited descriptor, no core dump.
    if (auto r = sbx::shed_inheritance(); !r) {
        sbx::log::error("{}", r.error().to_string());
        return kExitConfigError;
    }
    sbx::StopSignals stop_signals;  // before any thread exists
    // A console reader that goes away must not kill the VMM (the library
    // uses send(MSG_NOSIGNAL) for sockets; pipes need this).
    std::signal(SIGPIPE, SIG_IGN);
    CLI::App app{"sbx-vmm: boot a Linux microVM on KVM, or restore one from a snapshot.\n"
                 "Exit status: 0 when the guest reboots (reboot=k) or powers off or the VM is stopped\n"
                 "through the control socket or by SIGTERM, SIGINT or SIGHUP (vCPUs first, then the\n"
                 "devices and their I/O in flight), 1 when the VM cannot be created (bad configuration\n"
                 "or input, no usable KVM, a snapshot that cannot be restored), 2 on a guest triple\n"
                 "fault, 3 on a KVM error, 4 on a VMM error, 5 on a guest kernel panic, 6 when a thread\n"
                 "made a system call its seccomp filter forbids (the line before says which)."};
    app.set_version_flag("--version", "sbx-vmm 0.1.0");

    Flags f;
    app.add_option("--config", f.config_path, "TOML file ([machine] cpus, memory_mib; [boot] kernel, "
                                              "initrd, cmdline; [console] output, max_bytes; [[disk]] path, read_only; [net] "
                                              "tap, mac; [vsock] cid, uds; [rng] enabled); flags override it, "
                                              "--disk adds to its disks")
        ->check(CLI::ExistingFile);
    app.add_option("--kernel", f.kernel, "bzImage or ELF vmlinux");
    app.add_option("--initrd", f.initrd, "initial ramdisk (cpio archive, optionally compressed)");
    app.add_option("--cmdline", f.cmdline, fmt::format("kernel command line (default: \"{}\")",
                                                       sbx::VmConfig::kDefaultCmdline));
    app.add_option("--cpus", f.cpus, "number of vCPUs (default 1)");
    app.add_option("--memory", f.memory, fmt::format("guest memory in MiB (default {})",
                                                     sbx::VmConfig::kDefaultMemoryMib));
    app.add_option("--console", f.console, "serial console: stdout (default), none, file:PATH, append:PATH, socket:PATH");
    app.add_option("--console-max-bytes", f.console_max_bytes,
                   "with file: or append:, keep the file under this many bytes (at least 4096) by dropping "
                   "its oldest half when it passes them (default: no bound)");
    app.add_option("--kvm-device", f.kvm_device, "KVM device node (default /dev/kvm)");
    app.add_option("--disk", f.disks, "virtio-blk disk from a raw or qcow2 v3 image: PATH[,ro][,backing=on] "
                                      "(backing=on: a qcow2 image may open the backing file it names); "
                                      "repeatable, the first is /dev/vda, the next /dev/vdb, ...");
    app.add_option("--net", f.net, "virtio-net on a tap device: tap=NAME[,mac=MAC] (the tap is created when "
                                   "sbx-vmm may, else it must exist and be usable by this user)");
    app.add_option("--vsock", f.vsock, "virtio-vsock: cid=N,uds=PATH; the host connects to PATH and sends "
                                       "\"CONNECT <port>\\n\"; guest connections to host port P go to PATH_P");
    app.add_flag("--rng", f.rng, "virtio-rng, fed from the host's getrandom()");
    std::string control;
    app.add_option("--control", control, "serve the control socket (JSON lines: status, pause, resume, "
                                         "snapshot, diagnose, stop) at this Unix socket path (mode 0600; "
                                         "only this user and root may connect)");
    std::string snapshot_dir;
    app.add_option("--snapshot-dir", snapshot_dir, "the directory (or below it) where the snapshot op may "
                                                   "write; without it the op is refused")
        ->check(CLI::ExistingDirectory);
    Restore restore;
    app.add_option("--restore", restore.path, "restore the VM saved in this snapshot instead of booting. The "
                                              "file names no host resource: give the host side of each saved "
                                              "device (--disk for every saved disk, in order, with its read-only "
                                              "setting and size; --net tap; --vsock); vCPUs and memory come "
                                              "from the file, bounded by --max-cpus and --max-memory")
        ->check(CLI::ExistingFile);
    app.add_option("--max-cpus", f.max_cpus, "with --restore: refuse a snapshot with more vCPUs (default: "
                                             "this host's online CPUs)");
    app.add_option("--max-memory", f.max_memory, "with --restore: refuse a snapshot with more memory, in MiB "
                                                 "(default: this host's RAM)");
    app.add_option("--restore-mode", restore.mode, "eager (read all memory first), lazy (start at once; "
                                                   "memory loads on fault and behind) or private (map a raw "
                                                   "snapshot copy-on-write; pages load on first touch)");
    std::string jail_dir, jail_user;
    app.add_option("--jail", jail_dir, "once the VM is assembled, run in new mount, IPC, UTS and network "
                                       "namespaces with this directory as the only host path left (bound at "
                                       "its own path; --snapshot-dir, --vsock uds and --control must be in "
                                       "it), as --jail-user (docs/security.md)")
        ->check(CLI::ExistingDirectory);
    app.add_option("--jail-user", jail_user, "with --jail: UID:GID to run as (non-zero)");
    std::vector<std::string> jail_test_open;
    app.add_option("--jail-test-open", jail_test_open, "tests: once jailed, try to open this path and say how "
                                                       "it went")
        ->group("");
    std::string seccomp = "on";
    app.add_option("--seccomp", seccomp, "on (default): each thread runs under its seccomp filter "
                                         "(docs/security.md); off: none, for debugging only")
        ->check(CLI::IsMember({"on", "off"}));
    std::string seccomp_violation;
    app.add_option("--seccomp-test-violation", seccomp_violation,
                   "tests: a thread of this class (run, vcpu, devices, control, signals, lazy-fault, "
                   "lazy-load) makes one forbidden system call once confined")
        ->group("");
    CLI11_PARSE(app, argc, argv);
    f.cpus_set = app.count("--cpus") > 0;
    f.memory_set = app.count("--memory") > 0;
    f.console_max_set = app.count("--console-max-bytes") > 0;

    std::optional<sbx::JailSpec> jail;
    if (!jail_dir.empty() || !jail_user.empty()) {
        auto identity = jail_user.empty() || jail_dir.empty()
                            ? sbx::Result<sbx::JailIdentity>(sbx::make_coded_error(
                                  "bad_config", "--jail and --jail-user go together"))
                            : sbx::parse_jail_identity(jail_user);
        auto spec = identity ? sbx::make_jail_spec(jail_dir, *identity) : identity.error();
        if (!spec) {
            sbx::log::error("{}", describe(spec.error()));
            return kExitConfigError;
        }
        jail = std::move(*spec);
        if (!control.empty() && !control.starts_with('/')) {
            control = std::filesystem::absolute(control).lexically_normal().string();
        }
    }

    std::unique_ptr<sbx::SeccompPolicy> seccomp_policy;
    sbx::ThreadStartHook thread_hook;
    if (seccomp == "on") {
        auto violate = sbx::parse_thread_class(seccomp_violation);
        if (!seccomp_violation.empty() && !violate) {
            sbx::log::error("--seccomp-test-violation: no thread class '{}'", seccomp_violation);
            return kExitConfigError;
        }
        auto policy = sbx::SeccompPolicy::create(jail ? std::optional(jail->identity) : std::nullopt);
        if (!policy) {
            sbx::log::error("{}", describe(policy.error()));
            return kExitConfigError;
        }
        seccomp_policy = std::move(*policy);
        thread_hook = seccomp_policy->hook(violate);
    }
    thread_hook = confine_each_thread(std::move(thread_hook), jail.has_value());

    sbx::VmConfig config;
    sbx::snapshot::RestoredVm restored;  // holds what a restored VM's memory reads from
    std::unique_ptr<sbx::Vm> booted;
    sbx::Vm* vm = nullptr;
    if (!restore.path.empty()) {
        auto r = restore_vm(f, restore, start, thread_hook);
        if (!r) {
            sbx::log::error("{}", describe(r.error()));
            return kExitConfigError;
        }
        restored = std::move(*r);
        config = restored.config;
        vm = restored.vm.get();
    } else {
        auto applied = apply_flags(f, config);
        auto built = applied ? sbx::VmBuilder(config, start).build() : applied.error();
        if (!built) {
            sbx::log::error("{}", describe(built.error()));
            return kExitConfigError;
        }
        booted = std::move(*built);
        booted->set_thread_start_hook(thread_hook);
        vm = booted.get();
    }
    sbx::ControlOptions control_options;
    if (!snapshot_dir.empty()) {
        auto dir = sbx::canonical_snapshot_dir(snapshot_dir);
        if (!dir) {
            sbx::log::error("--snapshot-dir: {}", describe(dir.error()));
            return kExitConfigError;
        }
        control_options.snapshot_dir = std::move(*dir);
    }
    // Where a triple fault's memory goes (crash_dump.hpp), opened before a jail hides it.
    const char* crash_dump_path = std::getenv("SBX_VMM_CRASH_DUMP_DIR");
    sbx::UniqueFd crash_dump_dir;
    if (crash_dump_path != nullptr) {
        crash_dump_dir.reset(::open(crash_dump_path, O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!crash_dump_dir) {
            sbx::log::warn("SBX_VMM_CRASH_DUMP_DIR {}: {}", crash_dump_path, std::strerror(errno));
        }
    }
    if (jail) {
        // Before the control server's thread: only lazy restore's threads
        // exist to take the new ids with the main thread.
        auto entered = check_jail_paths(*jail, control, control_options, config);
        if (entered) {
            entered = sbx::enter_jail(*jail);
        }
        if (!entered) {
            sbx::log::error("{}", describe(entered.error()));
            return kExitConfigError;
        }
        for (const auto& path : jail_test_open) {
            sbx::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
            sbx::log::info("jail test: open {}: {}", path, fd ? "opened" : std::strerror(errno));
        }
    }
    std::unique_ptr<sbx::ControlServer> server;
    if (!control.empty()) {
        auto handler = [vm, &config, &control_options](const nlohmann::json& request) {
            return sbx::handle_control_request(*vm, config, control_options, request);
        };
        auto started = sbx::ControlServer::start(control, handler, thread_hook);
        if (!started) {
            sbx::log::error("{}", describe(started.error()));
            return kExitConfigError;
        }
        server = std::move(*started);
    }
    // Everything is open (/dev/kvm, tap, disks, userfaultfd, sockets).
    if (auto r = sbx::drop_capabilities(); !r) {
        sbx::log::error("{}", describe(r.error()));
        return kExitConfigError;
    }
    stop_signals.start(
        [vm](int signo) {
            vm->request_exit({sbx::ExitReason::Stopped, fmt::format("stopped by SIG{}", sigabbrev_np(signo))});
        },
        thread_hook);
    sbx::VmExit exit = vm->run();
    stop_signals.stop();
    server.reset();  // no request may reach a VM that has stopped
    if (restored.lazy) {
        log_lazy_stats(*restored.lazy);
    }
    if (crash_dump_dir && exit.reason == sbx::ExitReason::TripleFault) {
        const std::string name = fmt::format("sbx-vmm-{}.mem", ::getpid());
        auto dumped = sbx::write_crash_dump(vm->memory(), crash_dump_dir.get(), name);
        if (dumped) {
            sbx::log::error("crash dump: {}/{} ({} bytes of non-zero pages)", crash_dump_path, name, *dumped);
        } else {
            sbx::log::error("crash dump: {}", describe(dumped.error()));
        }
    }
    auto boot = vm->boot_time();
    std::string boot_text = boot ? fmt::format("{:.3f} ms", static_cast<double>(boot->count()) / 1000.0)
                                 : std::string("not reported");
    int code = sbx::exit_code(exit.reason);
    if (code == 0) {
        sbx::log::info("exit: {} ({}); boot time {}", sbx::to_string(exit.reason), exit.message, boot_text);
    } else {
        sbx::log::error("exit: {}: {}", sbx::to_string(exit.reason), exit.message);
    }
    return code;
}

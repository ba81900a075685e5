// sbx-vmm: one microVM per process, a thin main over libsbxvmm.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "vmm/vm_builder.hpp"

namespace {

constexpr int kExitConfigError = 1;
constexpr std::size_t kMaxConfigBytes = 1 << 20;

}  // namespace

int main(int argc, char** argv) {
    const auto start = sbx::Vm::Clock::now();
    // A console reader that goes away must not kill the VMM (the library
    // uses send(MSG_NOSIGNAL) for sockets; pipes need this).
    std::signal(SIGPIPE, SIG_IGN);
    CLI::App app{"sbx-vmm: boot a Linux microVM on KVM.\n"
                 "Exit status: 0 when the guest reboots (reboot=k) or powers off, 1 when the VM\n"
                 "cannot be created (bad configuration or input, no usable KVM), 2 on a guest\n"
                 "triple fault, 3 on a KVM error, 4 on a VMM error."};
    app.set_version_flag("--version", "sbx-vmm 0.1.0");

    std::string config_path;
    std::string kernel, initrd, cmdline, console;
    unsigned cpus = 0;
    std::uint64_t memory = 0;
    app.add_option("--config", config_path, "TOML file ([machine] cpus, memory_mib; [boot] kernel, "
                                            "initrd, cmdline; [console] output; [[disk]] path, read_only; [net] "
                                            "tap, mac; [vsock] cid, uds; [rng] enabled); flags override it, "
                                            "--disk adds to its disks")
        ->check(CLI::ExistingFile);
    app.add_option("--kernel", kernel, "bzImage or ELF vmlinux");
    app.add_option("--initrd", initrd, "initial ramdisk (cpio archive, optionally compressed)");
    app.add_option("--cmdline", cmdline, fmt::format("kernel command line (default: \"{}\")",
                                                     sbx::VmConfig::kDefaultCmdline));
    app.add_option("--cpus", cpus, "number of vCPUs (default 1)");
    app.add_option("--memory", memory, fmt::format("guest memory in MiB (default {})",
                                                   sbx::VmConfig::kDefaultMemoryMib));
    app.add_option("--console", console, "serial console: stdout (default), none, file:PATH, socket:PATH");
    std::string kvm_device;
    app.add_option("--kvm-device", kvm_device, "KVM device node (default /dev/kvm)");
    std::vector<std::string> disks;
    std::string net, vsock;
    bool rng = false;
    app.add_option("--disk", disks, "virtio-blk disk from a raw image: PATH[,ro]; repeatable, the first is "
                                    "/dev/vda, the next /dev/vdb, ...");
    app.add_option("--net", net, "virtio-net on a tap device: tap=NAME[,mac=MAC] (the tap is created when "
                                 "sbx-vmm may, else it must exist and be usable by this user)");
    app.add_option("--vsock", vsock, "virtio-vsock: cid=N,uds=PATH; the host connects to PATH and sends "
                                     "\"CONNECT <port>\\n\"; guest connections to host port P go to PATH_P");
    app.add_flag("--rng", rng, "virtio-rng, fed from the host's getrandom()");
    CLI11_PARSE(app, argc, argv);

    sbx::VmConfig config;
    if (!config_path.empty()) {
        auto text = sbx::read_file(config_path, kMaxConfigBytes);
        if (!text) {
            sbx::log::error("{}", text.error().to_string());
            return kExitConfigError;
        }
        if (auto r = config.merge_toml(*text, config_path); !r) {
            sbx::log::error("{}", r.error().to_string());
            return kExitConfigError;
        }
    }
    if (!kernel.empty()) config.kernel = kernel;
    if (!initrd.empty()) config.initrd = initrd;
    if (!cmdline.empty()) config.cmdline = cmdline;
    if (app.count("--cpus") > 0) config.cpus = cpus;
    if (app.count("--memory") > 0) config.memory_mib = memory;
    if (!kvm_device.empty()) config.kvm_device = kvm_device;
    if (!console.empty()) {
        auto c = sbx::ConsoleConfig::parse(console);
        if (!c) {
            sbx::log::error("{}", c.error().to_string());
            return kExitConfigError;
        }
        config.console = *c;
    }

    for (const auto& spec : disks) {
        auto d = sbx::DiskConfig::parse(spec);
        if (!d) {
            sbx::log::error("--disk: {}", d.error().to_string());
            return kExitConfigError;
        }
        config.disks.push_back(*d);
    }
    if (!net.empty()) {
        auto n = sbx::NetConfig::parse(net);
        if (!n) {
            sbx::log::error("--net: {}", n.error().to_string());
            return kExitConfigError;
        }
        config.net = *n;
    }
    if (!vsock.empty()) {
        auto v = sbx::VsockConfig::parse(vsock);
        if (!v) {
            sbx::log::error("--vsock: {}", v.error().to_string());
            return kExitConfigError;
        }
        config.vsock = *v;
    }
    if (rng) {
        config.rng = true;
    }

    auto vm = sbx::VmBuilder(config, start).build();
    if (!vm) {
        sbx::log::error("{}", vm.error().to_string());
        return kExitConfigError;
    }
    sbx::VmExit exit = (*vm)->run();
    auto boot = (*vm)->boot_time();
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

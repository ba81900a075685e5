#include "snapshot/machine_codec.hpp"

namespace sbx::snapshot {

namespace {

constexpr std::uint16_t kConfigVersion = 1;
constexpr std::uint16_t kMachineVersion = 1;
constexpr std::size_t kMaxPath = 4096;
constexpr std::uint32_t kMaxDisks = 64;
constexpr std::uint32_t kMaxVcpus = 1024;
constexpr std::uint32_t kMaxVirtio = 64;
constexpr std::size_t kMaxDeviceState = 1 << 20;

}  // namespace

std::vector<std::uint8_t> encode_config(const VmConfig& config) {
    ByteWriter w;
    w.u16(kConfigVersion);
    w.string(config.kernel);
    w.string(config.initrd);
    w.string(config.cmdline);
    w.u32(config.cpus);
    w.u64(config.memory_mib);
    w.u32(static_cast<std::uint32_t>(config.disks.size()));
    for (const auto& disk : config.disks) {
        w.string(disk.path);
        w.boolean(disk.read_only);
    }
    w.boolean(config.net.has_value());
    if (config.net) {
        w.string(config.net->tap);
        w.string(config.net->mac);
    }
    w.boolean(config.vsock.has_value());
    if (config.vsock) {
        w.u64(config.vsock->cid);
        w.string(config.vsock->uds);
    }
    w.boolean(config.rng);
    return w.take();
}

Result<VmConfig> decode_config(std::span<const std::uint8_t> bytes) {
    ByteReader r(bytes);
    VmConfig config;
    if (auto version = r.u16(); !r.failed() && version != kConfigVersion) {
        return make_error("unsupported_version: configuration section version {}", version);
    }
    config.kernel = r.string(kMaxPath);
    config.initrd = r.string(kMaxPath);
    config.cmdline = r.string(kMaxPath);
    config.cpus = r.u32();
    config.memory_mib = r.u64();
    auto disks = r.count(5, kMaxDisks);
    for (std::uint32_t i = 0; i < disks; ++i) {
        DiskConfig disk;
        disk.path = r.string(kMaxPath);
        disk.read_only = r.boolean();
        config.disks.push_back(std::move(disk));
    }
    if (r.boolean()) {
        NetConfig net;
        net.tap = r.string(kMaxPath);
        net.mac = r.string(kMaxPath);
        config.net = std::move(net);
    }
    if (r.boolean()) {
        VsockConfig vsock;
        vsock.cid = r.u64();
        vsock.uds = r.string(kMaxPath);
        config.vsock = std::move(vsock);
    }
    config.rng = r.boolean();
    if (auto done = r.finish("corrupt: configuration section"); !done) {
        return done.error();
    }
    if (auto valid = config.validate(); !valid) {
        return valid.error().context("corrupt: configuration section");
    }
    return config;
}

std::vector<std::uint8_t> encode_machine(const MachineState& state) {
    ByteWriter w;
    w.u16(kMachineVersion);
    w.u32(static_cast<std::uint32_t>(state.vcpus.size()));
    for (const auto& vcpu : state.vcpus) {
        vcpu.encode(w);
    }
    state.vm.encode(w);
    state.serial.encode(w);
    state.i8042.encode(w);
    w.u32(static_cast<std::uint32_t>(state.virtio.size()));
    for (const auto& device : state.virtio) {
        w.blob(device);
    }
    return w.take();
}

Result<MachineState> decode_machine(std::span<const std::uint8_t> bytes) {
    ByteReader r(bytes);
    MachineState state;
    if (auto version = r.u16(); !r.failed() && version != kMachineVersion) {
        return make_error("unsupported_version: machine section version {}", version);
    }
    auto vcpus = r.count(1, kMaxVcpus);
    for (std::uint32_t i = 0; i < vcpus && !r.failed(); ++i) {
        auto vcpu = kvm::VcpuState::decode(r);
        if (!vcpu) {
            return vcpu.error().context(fmt::format("corrupt: vCPU {} state", i));
        }
        state.vcpus.push_back(std::move(*vcpu));
    }
    auto vm = kvm::VmState::decode(r);
    if (!vm) {
        return vm.error().context("corrupt: VM state");
    }
    state.vm = std::move(*vm);
    auto serial = Serial::State::decode(r);
    if (!serial) {
        return serial.error().context("corrupt: serial state");
    }
    state.serial = std::move(*serial);
    auto i8042 = I8042::State::decode(r);
    if (!i8042) {
        return i8042.error().context("corrupt: i8042 state");
    }
    state.i8042 = std::move(*i8042);
    auto devices = r.count(4, kMaxVirtio);
    for (std::uint32_t i = 0; i < devices; ++i) {
        auto blob = r.blob(kMaxDeviceState);
        state.virtio.emplace_back(blob.begin(), blob.end());
    }
    if (auto done = r.finish("corrupt: machine section"); !done) {
        return done.error();
    }
    return state;
}

}  // namespace sbx::snapshot

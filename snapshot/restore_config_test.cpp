#include <doctest/doctest.h>

#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "snapshot/format/test_util.hpp"
#include "snapshot/machine_codec.hpp"
#include "snapshot/restore_config.hpp"
#include "snapshot/vm_snapshot.hpp"
#include "vmm/boot/layout.hpp"
#include "vmm/kvm/kvm_state_samples.hpp"

using namespace sbx;
using namespace sbx::snapshot;

namespace {

VmConfig saved_machine() {
    VmConfig config;
    config.kernel = "/images/vmlinux";
    config.cpus = 2;
    config.memory_mib = 256;
    config.disks = {{"/origin/root.ext4", false}, {"/origin/base.ext4", true}};
    config.net = NetConfig{"tap-origin", "02:00:00:00:00:01"};
    config.vsock = VsockConfig{3, "/origin/v.sock"};
    config.rng = true;
    return config;
}

RestoreHost matching_host() {
    RestoreHost host;
    host.console.kind = ConsoleConfig::Kind::None;
    host.disks = {{"/fork/root.ext4", false}, {"/shared/base.ext4", true}};
    host.net = NetConfig{"tap-fork", ""};
    host.vsock = VsockConfig{11, "/fork/v.sock"};
    host.max_cpus = 4;
    host.max_memory_mib = 1024;
    return host;
}

std::string code_of(const Result<VmConfig>& r) { return r ? std::string("ok") : r.error().code; }

}  // namespace

TEST_CASE("a restore takes the machine from the file and every host resource from its caller") {
    auto config = restored_config(saved_machine(), matching_host());
    REQUIRE_MESSAGE(config, config.error().to_string());
    CHECK(config->cpus == 2);
    CHECK(config->memory_mib == 256);
    REQUIRE(config->disks.size() == 2);
    CHECK(config->disks[0].path == "/fork/root.ext4");
    CHECK(config->disks[1].path == "/shared/base.ext4");
    CHECK(config->disks[1].read_only);
    CHECK(config->net->tap == "tap-fork");
    CHECK(config->net->mac == "02:00:00:00:00:01");  // no MAC given: the guest keeps its own
    CHECK(config->vsock->cid == 11);                 // a fork's new CID
    CHECK(config->vsock->uds == "/fork/v.sock");
    CHECK(config->rng);
    CHECK(config->console.kind == ConsoleConfig::Kind::None);

    auto host = matching_host();
    host.net->mac = "02:00:00:00:00:2a";
    CHECK(restored_config(saved_machine(), host)->net->mac == "02:00:00:00:00:2a");
}

TEST_CASE("a saved device without a host side is refused, naming the device") {
    auto host = matching_host();
    host.disks.pop_back();
    auto r = restored_config(saved_machine(), host);
    CHECK(code_of(r) == "missing_host_device");
    CHECK(r.error().message.find("disk vdb") != std::string::npos);
    host = matching_host();
    host.disks.clear();
    r = restored_config(saved_machine(), host);
    CHECK(r.error().message.find("disk vda") != std::string::npos);
    host = matching_host();
    host.net.reset();
    r = restored_config(saved_machine(), host);
    CHECK(code_of(r) == "missing_host_device");
    CHECK(r.error().message.find("virtio-net") != std::string::npos);
    host = matching_host();
    host.vsock.reset();
    r = restored_config(saved_machine(), host);
    CHECK(code_of(r) == "missing_host_device");
    CHECK(r.error().message.find("virtio-vsock") != std::string::npos);
}

TEST_CASE("a host side that does not match the saved devices is refused") {
    auto host = matching_host();
    host.disks.push_back({"/fork/extra.ext4", false});
    CHECK(code_of(restored_config(saved_machine(), host)) == "config_mismatch");
    host = matching_host();
    host.disks[1].read_only = false;  // the guest saw a read-only disk
    auto r = restored_config(saved_machine(), host);
    CHECK(code_of(r) == "config_mismatch");
    CHECK(r.error().message.find("vdb") != std::string::npos);
    auto no_vsock = saved_machine();
    no_vsock.vsock.reset();
    CHECK(code_of(restored_config(no_vsock, matching_host())) == "config_mismatch");
    auto no_net = saved_machine();
    no_net.net.reset();
    CHECK(code_of(restored_config(no_net, matching_host())) == "config_mismatch");
    host = matching_host();
    host.memory_mib = 512;
    CHECK(code_of(restored_config(saved_machine(), host)) == "config_mismatch");
    host = matching_host();
    host.cpus = 1;
    CHECK(code_of(restored_config(saved_machine(), host)) == "config_mismatch");
    host = matching_host();
    host.vsock->cid = 2;  // the host's own CID
    CHECK(code_of(restored_config(saved_machine(), host)) == "invalid");
}

TEST_CASE("vCPUs and memory from the file are bounded by the caller's limits") {
    auto host = matching_host();
    host.max_cpus = 1;
    auto r = restored_config(saved_machine(), host);
    CHECK(code_of(r) == "limit_exceeded");
    host = matching_host();
    host.max_memory_mib = 255;
    CHECK(code_of(restored_config(saved_machine(), host)) == "limit_exceeded");
    // Default limits: this host's CPUs and RAM. 16 TiB of guest memory is
    // more than any host running this test has.
    auto huge = saved_machine();
    huge.cpus = 1;
    huge.memory_mib = 16ULL << 20;
    host = matching_host();
    host.max_cpus = 0;
    host.max_memory_mib = 0;
    CHECK(code_of(restored_config(huge, host)) == "limit_exceeded");
}

namespace {

// A snapshot file whose configuration section asks for `disk` as a
// writable vda, with memory laid out as a 64 MiB VM's.
void write_crafted_snapshot(const std::string& path, const std::string& disk) {
    VmConfig config;
    config.kernel = "/images/vmlinux";
    config.memory_mib = boot::kMinGuestMemory >> 20;
    config.disks = {{disk, false}};
    MachineState machine;
    machine.vcpus = {kvm::testing::sample_vcpu_state()};
    machine.vm = kvm::testing::sample_vm_state();
    machine.virtio = {{}};
    test::TestMemory memory;
    for (const auto& region : boot::ram_regions(config.memory_mib << 20)) {
        memory.add(region.start.value, region.size, test::Fill::Zero);
    }
    SnapshotContents contents;
    contents.sections = {{kConfigSection, encode_config(config)}, {kMachineSection, encode_machine(machine)}};
    contents.memory = memory.views;
    REQUIRE(write_snapshot(path, contents));
}

struct FileWatch {
    int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    explicit FileWatch(const std::string& path) {
        REQUIRE(fd >= 0);
        REQUIRE(::inotify_add_watch(fd, path.c_str(), IN_OPEN | IN_MODIFY | IN_ATTRIB) >= 0);
    }
    ~FileWatch() { ::close(fd); }
    // Whether anything opened, wrote or changed the file since the watch began.
    bool touched() const {
        char buf[4096];
        return ::read(fd, buf, sizeof buf) > 0;
    }
};

struct timespec mtime_of(const std::string& path) {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return st.st_mtim;
}

}  // namespace

TEST_CASE("a crafted snapshot naming a host file as its disk is refused and never opens that file") {
    test::ScratchDir dir;
    const std::string victim = dir.path("host-secret.img");
    std::vector<std::uint8_t> precious(1 << 20, 0x5a);
    test::write_bytes(victim, precious);
    const std::string snap = dir.path("crafted.snap");
    write_crafted_snapshot(snap, victim);
    const auto before = mtime_of(victim);

    FileWatch watch(victim);
    RestoreOptions options;
    options.host.console.kind = ConsoleConfig::Kind::None;
    auto restored = restore_vm(snap, options);
    REQUIRE_FALSE(restored);
    CHECK(restored.error().code == "missing_host_device");
    CHECK(restored.error().message.find("disk vda") != std::string::npos);
    CHECK_FALSE(watch.touched());
    CHECK(test::read_bytes(victim) == precious);
    CHECK(mtime_of(victim).tv_sec == before.tv_sec);
    CHECK(mtime_of(victim).tv_nsec == before.tv_nsec);

    // With the caller's own image the device checks pass and the caller's
    // disk is the one opened; the build then stops at the KVM node (this
    // test needs no KVM), still without touching the named file.
    const std::string mine = dir.path("mine.img");
    test::write_bytes(mine, std::vector<std::uint8_t>(1 << 20, 0));
    FileWatch mine_watch(mine);
    FileWatch watch_again(victim);  // the reads above opened it
    options.host.disks = {{mine, false}};
    options.host.kvm_device = dir.path("no-kvm");
    restored = restore_vm(snap, options);
    REQUIRE_FALSE(restored);
    CHECK(restored.error().message.find("no-kvm") != std::string::npos);
    CHECK(mine_watch.touched());
    CHECK_FALSE(watch_again.touched());
    CHECK(test::read_bytes(victim) == precious);
}

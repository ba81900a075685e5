// What a restore takes from the snapshot file and what from its caller.
// The file is untrusted input: it describes the guest's machine (vCPUs,
// memory, which devices sit in which virtio slot and what the guest saw of
// them) but never chooses a host resource. Every device's host side (disk
// image, tap, vsock socket), the console and the KVM node come from the
// caller and are matched against the saved device list; vCPUs and memory
// come from the file, bounded by the caller's limits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vmm/config.hpp"

namespace sbx::snapshot {

struct RestoreHost {
    ConsoleConfig console;
    std::string kvm_device = "/dev/kvm";
    // One image per saved disk, in slot order (vda, vdb, ...), opened with
    // the saved disk's read-only setting; its size must be the saved one.
    std::vector<DiskConfig> disks;
    // The tap for a saved virtio-net card; an empty MAC keeps the guest's.
    std::optional<NetConfig> net;
    // The socket and CID for a saved virtio-vsock device (a fork takes a
    // new CID: the guest reads it from config space).
    std::optional<VsockConfig> vsock;
    // When set, must equal the snapshot's (config_mismatch otherwise).
    std::optional<unsigned> cpus;
    std::optional<std::uint64_t> memory_mib;
    // Upper bounds on what the file may ask for; 0: this host's online CPUs
    // and physical RAM.
    unsigned max_cpus = 0;
    std::uint64_t max_memory_mib = 0;
};

// The configuration to build the restored VM from: the saved machine with
// the caller's host side. Refuses, before anything is opened,
//  - limit_exceeded: more vCPUs or memory than the limits allow;
//  - missing_host_device: a saved device the caller gave no host side for;
//  - config_mismatch: a device the snapshot does not have, a disk whose
//    read-only setting differs, or a vCPU or memory count that differs.
[[nodiscard]] Result<VmConfig> restored_config(const VmConfig& saved, const RestoreHost& host);

}  // namespace sbx::snapshot

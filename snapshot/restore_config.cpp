#include "snapshot/restore_config.hpp"

#include <unistd.h>

namespace sbx::snapshot {

namespace {

unsigned host_cpus() {
    long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<unsigned>(n) : 1;
}

std::uint64_t host_memory_mib() {
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page_size = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) {
        return 0;
    }
    return (static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size)) >> 20;
}

std::string disk_name(std::size_t index) {
    return "vd" + std::string(1, static_cast<char>('a' + index));
}

Result<void> check_limits(const VmConfig& saved, const RestoreHost& host) {
    const unsigned max_cpus = host.max_cpus != 0 ? host.max_cpus : host_cpus();
    const std::uint64_t max_memory = host.max_memory_mib != 0 ? host.max_memory_mib : host_memory_mib();
    if (saved.cpus > max_cpus) {
        return make_coded_error("limit_exceeded", "the snapshot has {} vCPUs; this restore allows at most {}",
                                saved.cpus, max_cpus);
    }
    if (saved.memory_mib > max_memory) {
        return make_coded_error("limit_exceeded", "the snapshot has {} MiB of memory; this restore allows at most {} MiB",
                                saved.memory_mib, max_memory);
    }
    if (host.cpus && *host.cpus != saved.cpus) {
        return make_coded_error("config_mismatch", "the snapshot has {} vCPUs, not {}", saved.cpus, *host.cpus);
    }
    if (host.memory_mib && *host.memory_mib != saved.memory_mib) {
        return make_coded_error("config_mismatch", "the snapshot has {} MiB of memory, not {}", saved.memory_mib,
                                *host.memory_mib);
    }
    return ok();
}

Result<void> match_disks(const VmConfig& saved, const RestoreHost& host) {
    for (std::size_t i = 0; i < saved.disks.size(); ++i) {
        const DiskConfig& disk = saved.disks[i];
        const char* access = disk.read_only ? "read-only" : "writable";
        if (i >= host.disks.size()) {
            // The saved path is only named: it is the origin's, never opened.
            return make_coded_error("missing_host_device",
                                    "the snapshot has disk {} ({}, saved from {}) and the restore gives no image "
                                    "for it",
                                    disk_name(i), access, disk.path);
        }
        if (host.disks[i].read_only != disk.read_only) {
            return make_coded_error("config_mismatch", "disk {}: the snapshot's is {}, {} is given {}", disk_name(i),
                                    access, host.disks[i].path, host.disks[i].read_only ? "read-only" : "writable");
        }
    }
    if (host.disks.size() > saved.disks.size()) {
        return make_coded_error("config_mismatch", "the restore gives {} disks; the snapshot has {}",
                                host.disks.size(), saved.disks.size());
    }
    return ok();
}

template <typename T>
Result<void> match_presence(const std::optional<T>& saved, const std::optional<T>& given, std::string_view device,
                            std::string_view saved_as, std::string_view host_side) {
    if (saved && !given) {
        return make_coded_error("missing_host_device", "the snapshot has a {} ({}) and the restore gives no {}",
                                device, saved_as, host_side);
    }
    if (!saved && given) {
        return make_coded_error("config_mismatch", "the restore gives a {} {}; the snapshot has no {}", device,
                                host_side, device);
    }
    return ok();
}

}  // namespace

Result<VmConfig> restored_config(const VmConfig& saved, const RestoreHost& host) {
    if (auto r = check_limits(saved, host); !r) {
        return r.error();
    }
    if (auto r = match_disks(saved, host); !r) {
        return r.error();
    }
    const std::string saved_net =
        saved.net ? fmt::format("saved on tap {}, MAC {}", saved.net->tap, saved.net->mac) : std::string();
    if (auto r = match_presence(saved.net, host.net, "virtio-net card", saved_net, "tap"); !r) {
        return r.error();
    }
    const std::string saved_vsock =
        saved.vsock ? fmt::format("saved with CID {} on {}", saved.vsock->cid, saved.vsock->uds) : std::string();
    if (auto r = match_presence(saved.vsock, host.vsock, "virtio-vsock device", saved_vsock, "socket"); !r) {
        return r.error();
    }
    // The machine from the file (its kernel, initrd and command line are
    // informational: a restore loads none of them); nothing host-side.
    VmConfig config = saved;
    config.console = host.console;
    config.kvm_device = host.kvm_device;
    config.disks = host.disks;
    if (host.net) {
        config.net->tap = host.net->tap;
        if (!host.net->mac.empty()) {
            config.net->mac = host.net->mac;
        }
    }
    config.vsock = host.vsock;
    if (auto valid = config.validate(); !valid) {
        return valid.error().with_code("invalid");
    }
    return config;
}

}  // namespace sbx::snapshot

// Each VMM in a cgroup v2 of its own (docs/sbxd.md, "Cgroups"): under a
// root sbxd prepares at start, named after the sandbox's folder, with the
// limits the sandbox's size sets. sbx-vmm is started inside it, and it is
// removed (whatever still runs there killed) when sbxd ends that VMM.
#pragma once

#include <optional>
#include <string>

#include "base/cgroup.hpp"
#include "base/result.hpp"

namespace sbx::sbxd {

struct CgroupPlan {
    std::string root;  // an absolute directory on cgroup2
    // The controllers enabled below the root: only their limits are written.
    bool memory = false, pids = false, cpu = false, io = false;
    // The state directory is on tmpfs: a memory file a VMM writes or
    // faults in (a hole read fills it) is RAM charged to that VMM, up to
    // the guest's size again, and cannot be reclaimed without swap.
    bool memory_files_in_ram = false;
};

// Memory a VMM may use beyond its guest's RAM: its own heap, rings and
// buffers, and the page cache of its disk and memory files.
inline constexpr std::uint64_t kVmmOverheadMib = 256;
inline constexpr std::uint64_t kVmmPidsMax = 512;  // threads (vCPUs, devices, io_uring workers) and children
// CPU time per 100 ms: a whole CPU per vCPU and half of one more for the
// VMM's own threads, so that a guest whose vCPUs are busy does not
// throttle the device work done on its behalf (its vCPUs can use no more
// than their count either way).
inline constexpr std::uint64_t kCpuPeriodUs = 100'000;
inline constexpr std::uint64_t kVmmCpuHeadroomUs = 50'000;

// `option`: "off" (none), "auto" (/sys/fs/cgroup/sandboxer when
// /sys/fs/cgroup is cgroup2, else none, with a warning) or a directory
// on cgroup2. Creates the root and enables cpu, memory, pids and io below
// its parent and itself, as far as the parent offers them.
// `state_dir` decides memory_files_in_ram.
[[nodiscard]] Result<std::optional<CgroupPlan>> prepare_cgroup_root(const std::string& option,
                                                                     const std::string& state_dir);

// The limits for a VMM of `cpus` vCPUs and `memory_mib` of guest RAM (0:
// not known, no memory or CPU limit): memory.max is the guest's RAM, its
// memory file's again when those live in RAM, and kVmmOverheadMib.
[[nodiscard]] CgroupLimits vmm_cgroup_limits(const CgroupPlan& plan, int cpus, int memory_mib);

}  // namespace sbx::sbxd

// A cgroup v2 directory (Documentation/admin-guide/cgroup-v2.rst) made
// for one child process and its limits: the child is started inside it
// (clone3's CLONE_INTO_CGROUP, base/child_spawn.hpp), so everything it
// allocates, spawns or schedules is counted from its first instruction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "base/unique_fd.hpp"

namespace sbx {

// Each limit left at 0 is not written (the kernel's default: "max", or
// an io.weight of 100), so its controller need not be enabled.
struct CgroupLimits {
    std::uint64_t memory_max = 0;  // bytes: memory.max
    std::uint64_t pids_max = 0;    // tasks, threads included: pids.max
    std::uint64_t cpu_quota_us = 0;  // CPU time per 100 ms period (100000: one CPU): cpu.max
    std::uint32_t io_weight = 0;   // 1..10000: io.weight "default N", where the kernel has it (blk-iocost)
};

// Whether `dir` is on a cgroup2 file system (statfs CGROUP2_SUPER_MAGIC).
[[nodiscard]] bool is_cgroup2(const std::string& dir);

// Writes "+name" for each of `controllers` to dir/cgroup.subtree_control,
// so that the cgroups below `dir` get their interface files.
[[nodiscard]] Result<void> enable_cgroup_controllers(const std::string& dir,
                                                     const std::vector<std::string>& controllers);

class Cgroup {
public:
    // mkdir `path` (its parent must enable the controllers whose limits
    // are set) and writes the limits; a leftover directory of that name
    // (from a process that outlived its supervisor) is removed first.
    [[nodiscard]] static Result<Cgroup> create(const std::string& path, const CgroupLimits& limits);
    // Kills whatever still runs in `path` (cgroup.kill, Linux 5.14), waits
    // up to 5 s for it to empty and removes it. A missing `path` is fine.
    [[nodiscard]] static Result<void> remove(const std::string& path);

    Cgroup(Cgroup&& other) noexcept;
    Cgroup& operator=(Cgroup&&) = delete;
    Cgroup(const Cgroup&) = delete;
    Cgroup& operator=(const Cgroup&) = delete;
    ~Cgroup();  // remove(), unless released

    [[nodiscard]] int fd() const { return dir_.get(); }  // for CLONE_INTO_CGROUP
    [[nodiscard]] const std::string& path() const { return path_; }
    // The cgroup now belongs to the process started in it (which may
    // outlive this object and its owner); whoever sees that process end
    // calls remove().
    void release() { path_.clear(); }

private:
    Cgroup(std::string path, UniqueFd dir) : path_(std::move(path)), dir_(std::move(dir)) {}
    std::string path_;
    UniqueFd dir_;
};

}  // namespace sbx

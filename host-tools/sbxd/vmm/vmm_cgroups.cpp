#include "host-tools/sbxd/vmm/vmm_cgroups.hpp"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/ranges.h>

#include "base/log.hpp"

namespace sbx::sbxd {

namespace {

std::vector<std::string> words(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> out;
    for (std::string w; in >> w;) {
        out.push_back(w);
    }
    return out;
}

bool has(const std::vector<std::string>& list, const std::string& word) {
    return std::find(list.begin(), list.end(), word) != list.end();
}

}  // namespace

Result<std::optional<CgroupPlan>> prepare_cgroup_root(const std::string& option, const std::string& state_dir) {
    if (option == "off") {
        return std::optional<CgroupPlan>{};
    }
    std::string root = option;
    if (option == "auto") {
        if (!is_cgroup2("/sys/fs/cgroup")) {
            log::warn("no cgroup v2 at /sys/fs/cgroup: VMMs run without cgroup limits (--cgroup-root DIR names one)");
            return std::optional<CgroupPlan>{};
        }
        root = "/sys/fs/cgroup/sandboxer";
    }
    root = std::filesystem::absolute(root).lexically_normal().string();
    while (root.size() > 1 && root.back() == '/') {
        root.pop_back();
    }
    const std::string parent = std::filesystem::path(root).parent_path().string();
    if (!is_cgroup2(parent)) {
        return make_error("--cgroup-root {}: {} is not on a cgroup v2 file system", root, parent);
    }
    if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
        return sys_error("--cgroup-root: creating {}", root);
    }
    std::vector<std::string> wanted;
    const auto offered = words(parent + "/cgroup.controllers");
    for (const char* c : {"cpu", "memory", "pids", "io"}) {
        if (has(offered, c)) {
            wanted.emplace_back(c);
        }
    }
    // Enabled below the parent (so the root has them), then below the root.
    if (auto r = enable_cgroup_controllers(parent, wanted); !r) {
        return r.error().context("--cgroup-root");
    }
    if (auto r = enable_cgroup_controllers(root, wanted); !r) {
        return r.error().context("--cgroup-root");
    }
    const auto enabled = words(root + "/cgroup.subtree_control");
    CgroupPlan plan{root, has(enabled, "memory"), has(enabled, "pids"), has(enabled, "cpu"), has(enabled, "io")};
    struct statfs st {};
    plan.memory_files_in_ram = ::statfs(state_dir.c_str(), &st) == 0 && st.f_type == TMPFS_MAGIC;
    log::info("VMM cgroups under {} (controllers: {})", root, fmt::join(enabled, " "));
    return std::optional(plan);
}

CgroupLimits vmm_cgroup_limits(const CgroupPlan& plan, int cpus, int memory_mib) {
    CgroupLimits l;
    if (plan.memory && memory_mib > 0) {
        const auto guest = static_cast<std::uint64_t>(memory_mib);
        l.memory_max = ((plan.memory_files_in_ram ? 2 * guest : guest) + kVmmOverheadMib) << 20;
    }
    if (plan.pids) {
        l.pids_max = kVmmPidsMax;
    }
    if (plan.cpu && cpus > 0) {
        l.cpu_quota_us = static_cast<std::uint64_t>(cpus) * kCpuPeriodUs + kVmmCpuHeadroomUs;
    }
    if (plan.io) {
        l.io_weight = 100;
    }
    return l;
}

}  // namespace sbx::sbxd

#include "host-tools/sbxd/vmm/vmm_cgroups.hpp"

#include <doctest/doctest.h>

using namespace sbx::sbxd;

TEST_CASE("a VMM's limits follow its sandbox's size and the controllers enabled") {
    CgroupPlan all{"/sys/fs/cgroup/sandboxer", true, true, true, true};
    auto l = vmm_cgroup_limits(all, 2, 1024);
    CHECK(l.memory_max == (1024ULL + kVmmOverheadMib) << 20);
    CHECK(l.pids_max == kVmmPidsMax);
    CHECK(l.cpu_quota_us == 2 * kCpuPeriodUs + kVmmCpuHeadroomUs);
    CHECK(l.io_weight == 100);

    // Memory files on tmpfs are RAM too: room for one more guest's worth.
    all.memory_files_in_ram = true;
    CHECK(vmm_cgroup_limits(all, 1, 512).memory_max == (2 * 512ULL + kVmmOverheadMib) << 20);

    // A size not known (0) sets no memory or CPU limit; a controller not
    // enabled sets none of its own.
    auto unknown = vmm_cgroup_limits(all, 0, 0);
    CHECK(unknown.memory_max == 0);
    CHECK(unknown.cpu_quota_us == 0);
    CgroupPlan pids_only{"/x", false, true, false, false};
    auto p = vmm_cgroup_limits(pids_only, 4, 4096);
    CHECK(p.memory_max == 0);
    CHECK(p.cpu_quota_us == 0);
    CHECK(p.io_weight == 0);
    CHECK(p.pids_max == kVmmPidsMax);
}

TEST_CASE("--cgroup-root off is no plan; a directory not on cgroup2 is refused") {
    auto off = prepare_cgroup_root("off", "/tmp");
    REQUIRE(off);
    CHECK_FALSE(off->has_value());
    auto bad = prepare_cgroup_root("/tmp/not-a-cgroup/sandboxer", "/tmp");
    REQUIRE_FALSE(bad);
    CHECK(bad.error().to_string().find("cgroup v2") != std::string::npos);
}

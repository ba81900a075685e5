#include "host-tools/sbx-vmm/process_confinement.hpp"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace sbx {

Result<void> shed_inheritance() {
    if (::close_range(3, ~0U, 0) != 0) {
        return sys_error("close_range(3, ~0)");
    }
    const rlimit no_core{0, 0};
    if (::setrlimit(RLIMIT_CORE, &no_core) != 0) {
        return sys_error("setrlimit(RLIMIT_CORE, 0)");
    }
    return ok();
}

Result<void> drop_bounding_set() {
    // EPERM: no CAP_SETPCAP (any more). EINVAL is never asked for: only
    // capabilities PR_CAPBSET_READ says this kernel has are dropped.
    for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
        if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 &&
            errno != EPERM) {
            return sys_error("prctl(PR_CAPBSET_DROP, {})", cap);
        }
    }
    return ok();
}

Result<void> drop_capabilities(std::uint64_t keep) {
    // The bounding set first: dropping from it needs CAP_SETPCAP, which
    // the capset below takes away.
    if (auto r = drop_bounding_set(); !r) {
        return r;
    }
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
        return sys_error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
    }
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (keep != 0 && ::syscall(SYS_capget, &header, data) != 0) {
        return sys_error("capget");
    }
    // Only what is held can be kept: capset refuses to add to the
    // permitted set.
    for (std::size_t i = 0; i < _LINUX_CAPABILITY_U32S_3; ++i) {
        const auto kept = static_cast<std::uint32_t>(keep >> (32 * i)) & data[i].permitted;
        data[i] = {kept, kept, 0};
    }
    if (::syscall(SYS_capset, &header, data) != 0) {
        return sys_error("capset (all capabilities off)");
    }
    return ok();
}

std::uint64_t jail_id_capabilities() {
    return (std::uint64_t{1} << CAP_SETUID) | (std::uint64_t{1} << CAP_SETGID);
}

}  // namespace sbx

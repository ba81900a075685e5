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

Result<void> drop_capabilities() {
    // The bounding set first: dropping from it needs CAP_SETPCAP, which
    // the capset below takes away. EINVAL: a capability this kernel lacks.
    for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
        if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 &&
            errno != EPERM) {
            return sys_error("prctl(PR_CAPBSET_DROP, {})", cap);
        }
    }
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
        return sys_error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
    }
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (::syscall(SYS_capset, &header, data) != 0) {
        return sys_error("capset (all capabilities off)");
    }
    return ok();
}

}  // namespace sbx

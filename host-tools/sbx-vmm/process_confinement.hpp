// What sbx-vmm gives up about its process before the guest runs, beside
// the per-thread seccomp filters (seccomp_policy.hpp; docs/security.md):
// descriptors it inherited, core dumps (guest memory on disk), and every
// capability once /dev/kvm, the tap, the disks, userfaultfd and the
// sockets are open.
#pragma once

#include "base/result.hpp"

namespace sbx {

// At start, before anything is opened: closes every descriptor above
// stderr (close_range(2)) and sets RLIMIT_CORE to 0.
[[nodiscard]] Result<void> shed_inheritance();

// Once the VM is assembled, before it runs: clears the effective,
// permitted and inheritable sets (capset(2)), the ambient set, and the
// bounding set as far as the process may (PR_CAPBSET_DROP needs
// CAP_SETPCAP, which a root process has until this call).
[[nodiscard]] Result<void> drop_capabilities();

}  // namespace sbx

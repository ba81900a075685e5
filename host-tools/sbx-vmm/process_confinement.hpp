// What sbx-vmm gives up about its process before the guest runs, beside
// the per-thread seccomp filters (seccomp_policy.hpp; docs/security.md):
// descriptors it inherited, core dumps (guest memory on disk), and every
// capability once /dev/kvm, the tap, the disks, userfaultfd and the
// sockets are open.
#pragma once

#include <cstdint>

#include "base/result.hpp"

namespace sbx {

// At start, before anything is opened: closes every descriptor above
// stderr (close_range(2)) and sets RLIMIT_CORE to 0.
[[nodiscard]] Result<void> shed_inheritance();

// For the calling thread (capabilities are per thread): clears the
// inheritable set, the ambient set, the bounding set as far as the thread
// may (PR_CAPBSET_DROP needs CAP_SETPCAP, which a root thread has until
// this call), and the effective and permitted sets but for the
// capabilities in `keep` (a mask of CAP_* bits) it holds. sbx-vmm calls it
// in the main thread once the VM is assembled and at the start of every
// other thread; threads that exist when a jail switches ids keep
// CAP_SETUID and CAP_SETGID for it (leaving uid 0 then clears them).
[[nodiscard]] Result<void> drop_capabilities(std::uint64_t keep = 0);

// The calling thread's bounding set, as far as it may (CAP_SETPCAP).
[[nodiscard]] Result<void> drop_bounding_set();

// CAP_SETUID and CAP_SETGID: what a thread needs to take a jail's ids.
[[nodiscard]] std::uint64_t jail_id_capabilities();

}  // namespace sbx

// sbx-vmm's jail (--jail DIR --jail-user UID:GID): once the VM is
// assembled — /dev/kvm, the tap, the disks, the kernel, the snapshot,
// userfaultfd and the sockets open — and before the guest runs, the
// process leaves the host's view:
//   - new mount, IPC, UTS and network namespaces (unshare(2)); the tap's
//     fd and the Unix sockets keep working, nothing new can be reached
//     over the network;
//   - a root of its own (pivot_root(2)): an empty read-only tmpfs with DIR
//     bound at its own path, so the paths it was given under DIR (the
//     snapshot directory, the vsock sockets) name the same files and every
//     other host path is gone; DIR is nosuid, nodev, noexec;
//   - an unprivileged identity: supplementary groups cleared, then
//     setresgid/setresuid (glibc applies both to every thread), which
//     empties every thread's permitted and effective capabilities
//     (capabilities(7), "Effect of user ID changes"); the bounding set is
//     dropped first.
// No PID or user namespace: the VMM never starts a process (its seccomp
// filters forbid fork and exec) and runs as a real unprivileged uid.
// docs/security.md lists what a jailed VMM can see.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace sbx {

struct JailIdentity {
    uid_t uid = 0;
    gid_t gid = 0;
};

struct JailSpec {
    std::string dir;  // absolute and canonical: the only host directory kept
    JailIdentity identity;
};

// "UID:GID", both decimal and non-zero (a jail that stays root is no jail).
[[nodiscard]] Result<JailIdentity> parse_jail_identity(std::string_view text);

// DIR made canonical (it must exist and be a directory), with the identity.
[[nodiscard]] Result<JailSpec> make_jail_spec(const std::string& dir, JailIdentity identity);

// Whether `path` (absolute) names DIR or something below it, so that it is
// still reachable inside the jail; `what` names the flag in the error.
[[nodiscard]] Result<void> check_inside_jail(const JailSpec& spec, std::string_view what, const std::string& path);

// Enters the jail (above). Call from the main thread once everything is
// open, before any thread but lazy restore's exists; on error the process
// must end (it may be half inside).
[[nodiscard]] Result<void> enter_jail(const JailSpec& spec);

}  // namespace sbx

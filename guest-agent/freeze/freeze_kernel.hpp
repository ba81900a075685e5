// The kernel calls behind the freeze and thaw ops: the mount table and
// FIFREEZE / FITHAW (linux/fs.h; ioctl_fifreeze, needs CAP_SYS_ADMIN) on a
// mount point. The agent in a guest binds the real calls; every other
// agent (host tests, --listen-unix) binds one that refuses, so nothing
// but a guest's agent ever freezes a file system.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace sbx::agent {

class FreezeKernel {
public:
    virtual ~FreezeKernel() = default;
    // The text of /proc/self/mounts.
    [[nodiscard]] virtual Result<std::string> mounts() = 0;
    // FIFREEZE on the mount point: true when this call froze it, false
    // when it was frozen already (EBUSY).
    [[nodiscard]] virtual Result<bool> freeze(const std::string& mount_point) = 0;
    // FITHAW: true when this call thawed it, false when it was not frozen
    // (EINVAL).
    [[nodiscard]] virtual Result<bool> thaw(const std::string& mount_point) = 0;
};

[[nodiscard]] std::shared_ptr<FreezeKernel> make_system_freeze_kernel();
// Every call an error: for agents outside a guest.
[[nodiscard]] std::shared_ptr<FreezeKernel> make_refusing_freeze_kernel();

// The mount points to freeze, from /proc/self/mounts text (proc(5): source,
// mount point with \ooo escapes, type, options): writable mounts of the
// block-device file systems a guest disk holds (ext2/3/4, xfs, btrfs,
// f2fs), each once, the last mounted first so a mount goes before the one
// it sits on (as qemu-ga's guest-fsfreeze-freeze).
[[nodiscard]] std::vector<std::string> freeze_targets(std::string_view proc_mounts);

}  // namespace sbx::agent

namespace sbx::agent {

// FIFREEZE on every freeze_targets() mount in order; returns those this
// call froze. On a failure the ones it froze are thawed again and the
// error names the mount.
[[nodiscard]] Result<std::vector<std::string>> freeze_all(FreezeKernel& kernel);
// FITHAW on every freeze_targets() mount; returns those it thawed. Goes on
// past a failure and returns the first.
[[nodiscard]] Result<std::vector<std::string>> thaw_all(FreezeKernel& kernel);

}  // namespace sbx::agent

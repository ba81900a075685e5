// For the net/ unit tests that need a kernel: the test process moves into
// a network namespace of its own (and a mount namespace whose /sys shows
// that network namespace), or the test exits 77 (meson's SKIP).
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sbx::sbxd::net::testing {

// Idempotent; call it first in every test case that needs the kernel.
inline void enter_private_netns_or_skip() {
    static bool entered = false;
    if (entered) {
        return;
    }
    if (::geteuid() != 0) {
        std::printf("SKIP: needs root (a private network namespace)\n");
        std::exit(77);
    }
    if (::unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) {
        std::printf("SKIP: no network namespace here (unshare: %s)\n", std::strerror(errno));
        std::exit(77);
    }
    // Mounts made from here on stay in this process's mount namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) {
        ::mount("sysfs", "/sys", "sysfs", 0, nullptr);
    }
    entered = true;
}

}  // namespace sbx::sbxd::net::testing

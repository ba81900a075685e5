#include "host-tools/sbx-vmm/jail.hpp"

#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <memory>

#include "host-tools/sbx-vmm/process_confinement.hpp"

namespace sbx {

namespace {

// The scratch mount point of the new root, inside DIR (so it needs no
// other host path) and removed once the root has moved.
constexpr std::string_view kRootName = ".jail-root";
// The new root holds directories only: DIR's path components.
constexpr const char* kRootOptions = "size=64k,nr_inodes=256,mode=0755";

Result<void> jail_error(std::string_view what) {
    int err = errno;
    Error e = make_coded_error("jail", "jail: {}", what);
    e.errno_value = err;
    return e;
}

Result<unsigned long> parse_id(std::string_view text, std::string_view what) {
    unsigned long v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty() || v == 0 ||
        v >= static_cast<unsigned long>(UINT_MAX)) {
        return make_coded_error("bad_config", "--jail-user: {} '{}' is not a non-zero decimal id", what, text);
    }
    return v;
}

// mkdir -p below the new root, mode 0755 (root-owned, read-only later).
Result<void> make_path(const std::string& root, std::string_view path) {
    std::string at = root;
    std::size_t pos = 1;
    while (pos <= path.size()) {
        const std::size_t next = std::min(path.find('/', pos), path.size());
        at += '/';
        at += path.substr(pos, next - pos);
        if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
            return jail_error("mkdir " + at);
        }
        pos = next + 1;
    }
    return ok();
}

}  // namespace

Result<JailIdentity> parse_jail_identity(std::string_view text) {
    const auto colon = text.find(':');
    if (colon == std::string_view::npos) {
        return make_coded_error("bad_config", "--jail-user: '{}' is not UID:GID", text);
    }
    auto uid = parse_id(text.substr(0, colon), "uid");
    if (!uid) {
        return uid.error();
    }
    auto gid = parse_id(text.substr(colon + 1), "gid");
    if (!gid) {
        return gid.error();
    }
    return JailIdentity{static_cast<uid_t>(*uid), static_cast<gid_t>(*gid)};
}

Result<JailSpec> make_jail_spec(const std::string& dir, JailIdentity identity) {
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(dir.c_str(), nullptr), &std::free);
    if (!real) {
        return sys_error("--jail: {}", dir);
    }
    struct stat st {};
    if (::stat(real.get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return make_coded_error("bad_config", "--jail: {} is not a directory", dir);
    }
    if (std::string_view(real.get()) == "/") {
        return make_coded_error("bad_config", "--jail: the jail cannot be / (it would hide nothing)");
    }
    return JailSpec{real.get(), identity};
}

Result<void> check_inside_jail(const JailSpec& spec, std::string_view what, const std::string& path) {
    if (path.starts_with('/') && (path == spec.dir || path.starts_with(spec.dir + "/")) &&
        path.find("/../") == std::string::npos && !path.ends_with("/..")) {
        return ok();
    }
    return make_coded_error("bad_config", "{} {} is outside the jail {}: the jailed VMM could not reach it", what,
                            path, spec.dir);
}

Result<void> enter_jail(const JailSpec& spec) {
    if (::unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET) != 0) {
        return jail_error("unshare(mount, IPC, UTS, network namespaces)");
    }
    // Nothing mounted from here on propagates back to the host.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        return jail_error("mount --make-rprivate /");
    }
    const std::string root = spec.dir + "/" + std::string(kRootName);
    if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST) {
        return jail_error("mkdir " + root);
    }
    if (::mount("sbx-jail", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, kRootOptions) != 0) {
        return jail_error("mount tmpfs on " + root);
    }
    if (auto r = make_path(root, spec.dir); !r) {
        return r;
    }
    // Not MS_REC: the tmpfs just mounted inside DIR stays out of the jail.
    const std::string inner = root + spec.dir;
    if (::mount(spec.dir.c_str(), inner.c_str(), nullptr, MS_BIND, nullptr) != 0) {
        return jail_error("bind " + spec.dir);
    }
    if (::mount(nullptr, inner.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                nullptr) != 0) {
        return jail_error("remount " + spec.dir + " nosuid,nodev,noexec");
    }
    // pivot_root(".", "."): the old root stacks under the new one and is
    // detached at once (pivot_root(2), NOTES).
    if (::chdir(root.c_str()) != 0 || ::syscall(SYS_pivot_root, ".", ".") != 0) {
        return jail_error("pivot_root to " + root);
    }
    if (::umount2(".", MNT_DETACH) != 0 || ::chdir("/") != 0) {
        return jail_error("detach the host's root");
    }
    if (::mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                nullptr) != 0) {
        return jail_error("remount / read-only");
    }
    // Inside, DIR/.jail-root is an empty directory again (its mount was in
    // the detached tree).
    (void)::rmdir(root.c_str());
    if (::sethostname("sbx-vmm", 7) != 0) {
        return jail_error("sethostname");
    }
    if (auto r = drop_bounding_set(); !r) {
        return r.error().context("jail").with_code("jail");
    }
    if (::setgroups(0, nullptr) != 0) {
        return jail_error("setgroups(0)");
    }
    if (::setresgid(spec.identity.gid, spec.identity.gid, spec.identity.gid) != 0) {
        return jail_error("setresgid");
    }
    if (::setresuid(spec.identity.uid, spec.identity.uid, spec.identity.uid) != 0) {
        return jail_error("setresuid");
    }
    return ok();
}

}  // namespace sbx

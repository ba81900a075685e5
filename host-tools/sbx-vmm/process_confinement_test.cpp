// sbx-vmm's process confinement on this kernel, in forked children: no
// descriptor above stderr survives shed_inheritance, core dumps are off,
// drop_capabilities leaves no capability in any set (as root: the
// bounding set emptied too), and a jailed process sees only its directory,
// as its unprivileged ids, with no capability.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "host-tools/sbx-vmm/jail.hpp"
#include "host-tools/sbx-vmm/process_confinement.hpp"

namespace {

int run_in_child(int (*body)()) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::syscall(SYS_exit_group, body());
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The hex value of a "Cap...:" line of /proc/self/status.
std::string status_field(const std::string& name) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(name + ":", 0) == 0) {
            auto at = line.find_first_not_of(" \t", name.size() + 1);
            return at == std::string::npos ? std::string() : line.substr(at);
        }
    }
    return "missing";
}

}  // namespace

TEST_CASE("shed_inheritance closes every descriptor above stderr and turns core dumps off") {
    CHECK(run_in_child([] {
              const int a = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: an inherited one
              const int b = ::dup2(a, 200);
              if (a < 3 || b != 200 || !sbx::shed_inheritance()) {
                  return 10;
              }
              if (::fcntl(a, F_GETFD) != -1 || ::fcntl(200, F_GETFD) != -1 || ::fcntl(2, F_GETFD) == -1) {
                  return 11;
              }
              rlimit core{};
              ::getrlimit(RLIMIT_CORE, &core);
              return core.rlim_cur == 0 && core.rlim_max == 0 ? 0 : 12;
          }) == 0);
}

TEST_CASE("drop_capabilities leaves every set empty") {
    CHECK(run_in_child([] {
              char path[] = "/tmp/sbx-caps-XXXXXX";
              const int fd = ::mkstemp(path);
              if (fd < 0) {
                  return 9;
              }
              if (!sbx::drop_capabilities()) {
                  return 10;
              }
              const std::string zero = "0000000000000000";
              if (status_field("CapEff") != zero || status_field("CapPrm") != zero ||
                  status_field("CapInh") != zero || status_field("CapAmb") != zero) {
                  return 11;
              }
              // Root could empty its bounding set too; without CAP_SETPCAP it stays.
              if (::geteuid() == 0 && status_field("CapBnd") != zero) {
                  return 12;
              }
              // A capability-checked call now fails: giving our own file
              // to another owner (CAP_CHOWN), which root could before.
              const int changed = ::fchown(fd, 4242, 4242);
              ::unlink(path);
              return changed != 0 ? 0 : 13;
          }) == 0);
}

TEST_CASE("drop_capabilities can keep what a jail's ids need, and only what is held") {
    CHECK(run_in_child([] {
              if (!sbx::drop_capabilities(sbx::jail_id_capabilities())) {
                  return 10;
              }
              // As root: CAP_SETGID (6) and CAP_SETUID (7) stay; otherwise none was held.
              const std::string kept = ::geteuid() == 0 ? "00000000000000c0" : "0000000000000000";
              if (status_field("CapEff") != kept || status_field("CapPrm") != kept ||
                  status_field("CapInh") != "0000000000000000") {
                  return 11;
              }
              // Dropping again keeps nothing more than is left.
              if (!sbx::drop_capabilities() || status_field("CapPrm") != "0000000000000000") {
                  return 12;
              }
              return sbx::drop_capabilities(sbx::jail_id_capabilities()) && status_field("CapPrm") == "0000000000000000"
                         ? 0
                         : 13;
          }) == 0);
}

TEST_CASE("jail identities and paths are checked before anything is entered") {
    auto id = sbx::parse_jail_identity("4242:4343");
    REQUIRE(id);
    CHECK(id->uid == 4242);
    CHECK(id->gid == 4343);
    for (const char* bad : {"", "4242", "0:4242", "4242:0", "-1:5", "12a:5", "5:", ":5", "99999999999:1"}) {
        auto r = sbx::parse_jail_identity(bad);
        CHECK_MESSAGE(!r, bad);
        CHECK_MESSAGE((!r && r.error().code == "bad_config"), bad);
    }
    CHECK(sbx::make_jail_spec("/", *id).error().code == "bad_config");
    CHECK(!sbx::make_jail_spec("/nonexistent/jail", *id));
    const sbx::JailSpec spec{"/srv/sbx/one", *id};
    CHECK(sbx::check_inside_jail(spec, "--vsock uds", "/srv/sbx/one/v.sock"));
    CHECK(sbx::check_inside_jail(spec, "--snapshot-dir", "/srv/sbx/one"));
    for (const char* outside : {"/srv/sbx/one2/v.sock", "/srv/sbx", "/srv/sbx/one/../two/x", "relative/v.sock",
                                "/srv/sbx/one/.."}) {
        auto r = sbx::check_inside_jail(spec, "--vsock uds", outside);
        CHECK_MESSAGE(!r, outside);
    }
}

// As root on a kernel that lets it make namespaces (else the test says so
// and passes nothing: it is skipped).
TEST_CASE("a jailed process sees only its directory, as its ids, with no capability") {
    if (::geteuid() != 0) {
        MESSAGE("skipped: a jail needs root");
        return;
    }
    char dir_template[] = "/tmp/sbx-jail-XXXXXX";
    REQUIRE(::mkdtemp(dir_template) != nullptr);
    const std::string dir = dir_template;
    { std::ofstream(dir + "/inside") << "in"; }
    REQUIRE(::chown(dir.c_str(), 4242, 4343) == 0);
    ::setenv("SBX_JAIL_TEST_DIR", dir.c_str(), 1);
    const int status = run_in_child([] {
        const std::string jail = std::getenv("SBX_JAIL_TEST_DIR");
        auto spec = sbx::make_jail_spec(jail, {4242, 4343});
        if (!spec) {
            return 20;
        }
        if (auto r = sbx::enter_jail(*spec); !r) {
            return r.error().errno_value == EPERM ? 77 : 21;
        }
        if (::getuid() != 4242 || ::geteuid() != 4242 || ::getgid() != 4343 || ::getegid() != 4343) {
            return 22;
        }
        __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
        if (::syscall(SYS_capget, &header, data) != 0 || data[0].effective != 0 || data[0].permitted != 0 ||
            data[1].effective != 0 || data[1].permitted != 0) {
            return 23;
        }
        // Its directory, at the same path, readable and writable...
        std::ifstream in(jail + "/inside");
        std::string word;
        if (!(in >> word) || word != "in" || !std::ofstream(jail + "/written")) {
            return 24;
        }
        // ...and no other host path: not /etc, /dev/kvm, /proc or /usr;
        // /tmp holds only the jail.
        for (const char* host : {"/etc/passwd", "/dev/kvm", "/proc/self/status", "/usr"}) {
            struct stat st {};
            if (::stat(host, &st) == 0 || errno != ENOENT) {
                return 25;
            }
        }
        std::vector<std::string> in_tmp;
        for (const auto& entry : std::filesystem::directory_iterator("/tmp")) {
            in_tmp.push_back(entry.path().string());
        }
        if (in_tmp != std::vector<std::string>{jail}) {
            return 27;
        }
        // The root holds nothing to write into, and the scratch mount point is gone.
        if (::mkdir("/new", 0700) == 0 || ::access((jail + "/.jail-root").c_str(), F_OK) == 0) {
            return 26;
        }
        return 0;
    });
    std::filesystem::remove_all(dir);
    if (status == 77) {
        MESSAGE("skipped: this process may not make namespaces");
        return;
    }
    CHECK(status == 0);
}

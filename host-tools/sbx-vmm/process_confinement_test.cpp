// sbx-vmm's process confinement on this kernel, in forked children: no
// descriptor above stderr survives shed_inheritance, core dumps are off,
// and drop_capabilities leaves no capability in any set (as root: the
// bounding set emptied too).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

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

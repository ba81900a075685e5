// sbx-vmm's seccomp filters on this kernel: each class's filter compiles
// and loads; what the class needs still works under it; a forbidden call
// ends the process with status 6 and one line naming the thread, its class
// and the call; the filter holds for threads the confined thread starts.
// Each case runs in a forked child (a filter cannot be taken off).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <string>
#include <thread>

#include "host-tools/sbx-vmm/seccomp_policy.hpp"

namespace {

// exit_group(2) itself: a sanitizer's _exit runs a leak check, which the
// child's filter would trap.
[[noreturn]] void child_exit(int status) {
    ::syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

struct ChildEnd {
    int status = -1;  // exit status, or 128 + signal
    std::string stderr_text;
};

// Runs `body` in a forked child whose stderr goes to a pipe; the child
// exits 0 when `body` returns.
ChildEnd run_child(const std::function<void()>& body) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(fds[0]);
        ::dup2(fds[1], STDERR_FILENO);
        body();
        child_exit(0);
    }
    ::close(fds[1]);
    ChildEnd end;
    char buf[512];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) {
        end.stderr_text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    end.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return end;
}

void confine_or_exit(sbx::ThreadClass c) {
    auto policy = sbx::SeccompPolicy::create();
    if (!policy) {
        child_exit(90);
    }
    if (!(*policy)->confine(c)) {
        child_exit(91);
    }
    // Deliberately leaked: the filter outlives the policy object anyway.
    (void)policy->release();
}

constexpr sbx::ThreadClass kAll[] = {
    sbx::ThreadClass::Main,    sbx::ThreadClass::Vcpu,      sbx::ThreadClass::Device,
    sbx::ThreadClass::Control, sbx::ThreadClass::Signals,   sbx::ThreadClass::LazyFault,
    sbx::ThreadClass::LazyLoader,
};

}  // namespace

TEST_CASE("every class's filter loads, allows the runtime and traps mount(2) with status 6") {
    for (sbx::ThreadClass c : kAll) {
        const std::string name(sbx::thread_class_name(c));
        CAPTURE(name);
        auto end = run_child([c] {
            confine_or_exit(c);
            // The runtime every thread has: memory, time, a line on stderr.
            void* p = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                child_exit(92);
            }
            static_cast<char*>(p)[0] = 1;
            ::munmap(p, 1 << 20);
            timespec ts{};
            ::clock_gettime(CLOCK_MONOTONIC, &ts);
            [[maybe_unused]] auto w = ::write(STDERR_FILENO, "alive\n", 6);
            ::syscall(SYS_mount, nullptr, nullptr, nullptr, 0, nullptr);
            child_exit(93);  // not reached: the filter traps mount
        });
        CAPTURE(end.stderr_text);
        CHECK(end.status == sbx::kExitSeccomp);
        CHECK(end.stderr_text.find("alive\n") == 0);
        CHECK(end.stderr_text.find("(" + name + ") made system call " + std::to_string(SYS_mount) +
                                   " (mount), which its filter forbids\n") != std::string::npos);
    }
}

TEST_CASE("no class may map executable memory or signal another process") {
    for (sbx::ThreadClass c : kAll) {
        CAPTURE(std::string(sbx::thread_class_name(c)));
        auto exec_map = run_child([c] {
            confine_or_exit(c);
            ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        });
        CAPTURE(exec_map.stderr_text);
        CHECK(exec_map.status == sbx::kExitSeccomp);
        CHECK(exec_map.stderr_text.find("(mmap)") != std::string::npos);
        auto other = run_child([c] {
            confine_or_exit(c);
            ::syscall(SYS_tgkill, 1, 1, 0);  // pid 1, signal 0: only a probe
        });
        CAPTURE(other.stderr_text);
        CHECK(other.status == sbx::kExitSeccomp);
        CHECK(other.stderr_text.find("(tgkill)") != std::string::npos);
    }
}

TEST_CASE("a vCPU or device thread opens no file (EACCES); the device thread opens only Unix sockets") {
    for (auto c : {sbx::ThreadClass::Vcpu, sbx::ThreadClass::Device, sbx::ThreadClass::Signals,
                   sbx::ThreadClass::LazyFault, sbx::ThreadClass::LazyLoader}) {
        CAPTURE(std::string(sbx::thread_class_name(c)));
        auto opened = run_child([c] {
            confine_or_exit(c);
            const long fd = ::syscall(SYS_openat, AT_FDCWD, "/proc/sys/vm/overcommit_memory", O_RDONLY);
            child_exit(fd < 0 && errno == EACCES ? 0 : 97);
        });
        CAPTURE(opened.stderr_text);
        CHECK(opened.status == 0);
    }
    auto vcpu_socket = run_child([] {
        confine_or_exit(sbx::ThreadClass::Vcpu);
        ::socket(AF_UNIX, SOCK_STREAM, 0);
    });
    CAPTURE(vcpu_socket.stderr_text);
    CHECK(vcpu_socket.status == sbx::kExitSeccomp);
    CHECK(vcpu_socket.stderr_text.find("(vcpu) made system call " + std::to_string(SYS_socket)) != std::string::npos);

    auto device_unix = run_child([] {
        confine_or_exit(sbx::ThreadClass::Device);
        const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        child_exit(s >= 0 ? 0 : 94);
    });
    CAPTURE(device_unix.stderr_text);
    CHECK(device_unix.status == 0);
    auto device_inet = run_child([] {
        confine_or_exit(sbx::ThreadClass::Device);
        ::socket(AF_INET, SOCK_STREAM, 0);
    });
    CAPTURE(device_inet.stderr_text);
    CHECK(device_inet.status == sbx::kExitSeccomp);
    CHECK(device_inet.stderr_text.find("(socket)") != std::string::npos);

    auto device_exec = run_child([] {
        confine_or_exit(sbx::ThreadClass::Device);
        char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
        ::execve("/bin/true", argv, nullptr);
    });
    CAPTURE(device_exec.stderr_text);
    CHECK(device_exec.status == sbx::kExitSeccomp);
    CHECK(device_exec.stderr_text.find("(execve)") != std::string::npos);
}

TEST_CASE("a thread started by the control thread keeps the control filter and adds its own") {
    // The device loop restarted by a resume: control's filter, then the
    // device filter stacked on it. openat works on the control thread and
    // fails with EACCES on the device thread (its own filter, the stricter
    // action wins); an eventfd works under both; listen(2), in neither
    // list, traps.
    auto end = run_child([] {
        auto policy = sbx::SeccompPolicy::create();
        if (!policy || !(*policy)->confine(sbx::ThreadClass::Control)) {
            child_exit(90);
        }
        const long control_fd = ::syscall(SYS_openat, AT_FDCWD, "/proc/sys/vm/overcommit_memory", O_RDONLY);
        if (control_fd < 0) {
            child_exit(94);
        }
        auto hook = (*policy)->hook();
        std::thread t([&hook] {
            sbx::start_thread_as(sbx::ThreadClass::Device, 0, hook);
            const long fd = ::syscall(SYS_openat, AT_FDCWD, "/proc/sys/vm/overcommit_memory", O_RDONLY);
            if (fd >= 0 || errno != EACCES) {
                child_exit(95);
            }
            const int e = ::eventfd(0, EFD_CLOEXEC);
            const std::uint64_t one = 1;
            if (e < 0 || ::write(e, &one, sizeof one) != sizeof one) {
                child_exit(96);
            }
            ::listen(e, 1);
            child_exit(97);
        });
        t.join();
    });
    CAPTURE(end.stderr_text);
    CHECK(end.status == sbx::kExitSeccomp);
    CHECK(end.stderr_text.find("thread sbx-devices (devices) made system call " + std::to_string(SYS_listen)) !=
          std::string::npos);
}

TEST_CASE("thread class names parse back") {
    for (sbx::ThreadClass c : kAll) {
        CHECK(sbx::parse_thread_class(sbx::thread_class_name(c)) == c);
    }
    CHECK_FALSE(sbx::parse_thread_class("vcpu0"));
    CHECK_FALSE(sbx::parse_thread_class(""));
}

// Why a VMM ended, from its status and its log: the reasons the "crashed"
// state event carries.
#include <doctest/doctest.h>

#include <fstream>

#include "host-tools/sbxd/testing/temp_dir.hpp"
#include "host-tools/sbxd/vmm/vmm_exit_cause.hpp"

using namespace sbx::sbxd;

namespace {

// What sbx-vmm's SIGSYS reporter writes (host-tools/sbx-vmm/seccomp_policy.cpp).
constexpr const char* kSeccompLog =
    "sbx-vmm: info: VM set up in 12.500 ms; starting 1 vCPU(s)\n"
    "sbx-vmm: error: exit: seccomp: thread sbx-vcpu0 (vcpu) made system call 165 (mount), which its filter "
    "forbids\n";

ProcessEnd exited(int code) { return ProcessEnd{code, std::nullopt}; }

}  // namespace

TEST_CASE("a seccomp violation: reason, the reporter's line, the call's number") {
    auto cause = vmm_exit_cause(exited(kVmmExitSeccomp), kSeccompLog);
    CHECK(cause.reason == "seccomp");
    CHECK(cause.detail ==
          "sbx-vmm: error: exit: seccomp: thread sbx-vcpu0 (vcpu) made system call 165 (mount), which its "
          "filter forbids");
    REQUIRE(cause.syscall);
    CHECK(*cause.syscall == 165);
    // An adopted VMM (no status seen): the log alone says it.
    auto adopted = vmm_exit_cause(std::nullopt, kSeccompLog);
    CHECK(adopted.reason == "seccomp");
    CHECK(adopted.syscall == 165);
}

TEST_CASE("other endings: the status's reason and the last error line") {
    auto triple = vmm_exit_cause(exited(2), "sbx-vmm: error: crash dump: /x (1 bytes)\n"
                                            "sbx-vmm: error: exit: triple-fault: guest triple fault\n");
    CHECK(triple.reason == "triple_fault");
    CHECK(triple.detail == "sbx-vmm: error: exit: triple-fault: guest triple fault");
    CHECK_FALSE(triple.syscall);
    CHECK(vmm_exit_cause(exited(5), "").reason == "guest_panic");
    CHECK(vmm_exit_cause(exited(5), "").detail == "exit code 5");
    CHECK(vmm_exit_cause(exited(3), "").reason == "kvm_error");
    CHECK(vmm_exit_cause(exited(4), "").reason == "vmm_error");
    CHECK(vmm_exit_cause(exited(0), "sbx-vmm: info: exit: poweroff\n").reason == "vmm_exited");
    auto killed = vmm_exit_cause(ProcessEnd{std::nullopt, 9}, "");
    CHECK(killed.reason == "killed");
    CHECK(killed.detail == "signal 9");
    // Status 6 with no reporter line (the log lost): still seccomp, no number.
    auto bare = vmm_exit_cause(exited(kVmmExitSeccomp), "");
    CHECK(bare.reason == "seccomp");
    CHECK_FALSE(bare.syscall);
    // A seccomp line from an earlier run of the log does not make a triple fault one.
    CHECK(vmm_exit_cause(exited(2), kSeccompLog).reason == "triple_fault");
}

TEST_CASE("the log's tail: the last bytes only, empty when missing") {
    testing::TempDir dir;
    const std::string path = dir.path() + "/vmm.log";
    {
        std::ofstream out(path);
        out << std::string(20000, 'x') << "\n" << kSeccompLog;
    }
    auto tail = read_log_tail(path, 4096);
    CHECK(tail.size() == 4096);
    CHECK(vmm_exit_cause(exited(kVmmExitSeccomp), tail).syscall == 165);
    CHECK(read_log_tail(dir.path() + "/none").empty());
}

// sbx-vmm's seccomp-BPF filters: one allow list per thread class
// (base/thread_class.hpp), compiled once with libseccomp before any thread
// starts and loaded by each thread on itself before it does any work
// (seccomp(2); Documentation/userspace-api/seccomp_filter.rst). A filter
// applies to its thread and to the threads that thread starts, stacked
// with theirs.
//
// A call outside its thread's list traps (SECCOMP_RET_TRAP): the SIGSYS
// handler writes one line to stderr naming the thread, its class and the
// call ("sbx-vmm: error: exit: seccomp: thread sbx-vcpu0 (vcpu) made
// system call 165 (mount), which its filter forbids") and ends the
// process with status kExitSeccomp (6). A call from another ABI (x32, i386)
// kills the process. The lists are in seccomp_lists.cpp; docs/security.md
// says what each class may do.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/result.hpp"
#include "base/thread_class.hpp"
#include "host-tools/sbx-vmm/jail.hpp"

namespace sbx {

// After 0-5 (vmm/vm_exit.cpp exit_code: 5 is a guest panic).
inline constexpr int kExitSeccomp = 6;

// One seccomp_data argument comparison (libseccomp's scmp_arg_cmp, kept
// out of this header): argument `arg` compared by `op` with `value`.
struct SyscallArg {
    enum class Op { Equal, MaskedEqual };
    unsigned arg = 0;
    Op op = Op::Equal;
    std::uint64_t value = 0;
    std::uint64_t mask = 0;  // MaskedEqual: (argument & mask) == value
};

// Allowed when every comparison holds; a system call may have several
// rules (any one allows it). With `refuse_errno`, the call fails with that
// errno instead of trapping (glibc opens /proc/sys/vm/overcommit_memory
// once, from whichever thread first trims a malloc arena; it copes with
// EACCES).
struct SyscallRule {
    int nr = -1;
    std::vector<SyscallArg> args;
    int refuse_errno = 0;
};

// What a list may depend on: the process's own pid (tgkill, kill), and
// the identity a jail switches to (threads alive when it does take part).
struct PolicyContext {
    int pid = 0;
    std::optional<JailIdentity> jail;
};

std::vector<SyscallRule> allow_list(ThreadClass c, const PolicyContext& context);

class SeccompPolicy {
public:
    // Sets no_new_privs for the process, installs the SIGSYS reporter and
    // compiles every class's filter. Call once, before any thread starts;
    // `jail`: the identity enter_jail will switch to.
    static Result<std::unique_ptr<SeccompPolicy>> create(std::optional<JailIdentity> jail = std::nullopt);
    SeccompPolicy(const SeccompPolicy&) = delete;
    SeccompPolicy& operator=(const SeccompPolicy&) = delete;
    ~SeccompPolicy();

    // Loads class `c`'s filter on the calling thread.
    [[nodiscard]] Result<void> confine(ThreadClass c) const;

    // A hook that confines each thread, or ends the process with status
    // kExitSeccomp when it cannot. With `violate`, a thread of that class
    // then makes one forbidden call (tests: the reporter and the exit).
    [[nodiscard]] ThreadStartHook hook(std::optional<ThreadClass> violate = std::nullopt) const;

private:
    struct Program;
    SeccompPolicy();
    std::vector<Program> programs_;  // by ThreadClass
};

// "main", "vcpu", ... back to a class (for --seccomp-test-violation).
std::optional<ThreadClass> parse_thread_class(std::string_view name);

}  // namespace sbx

// The agent's children: each spawned process is a Child, and one
// process-wide Reaper collects them all.
//
// The reaper thread waits for every child of the process (waitid(P_ALL))
// and routes each exit to the Child it belongs to, exactly once. A child
// that ends before start_child() has registered it has its status kept
// for start_child() to claim; no lock is held while a child starts, so a
// program whose exec hangs (a file system that does not answer) holds up
// only the session that started it. The process is made a child
// subreaper (PR_SET_CHILD_SUBREAPER): descendants whose parents exit (a
// detached command's daemons) are re-parented to the agent rather than
// escaping to init, and the reaper collects them too. Nothing else in the
// process may wait for children once the first fork_child() has happened.
//
// Timeouts live here as well (a thread with a queue of deadlines), so they
// fire whatever the threads serving the process are blocked on.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "base/unique_fd.hpp"

namespace sbx::agent {

// How a process ended, as exec's exit message reports it.
struct ExitStatus {
    std::optional<int> code;    // exited normally
    std::optional<int> signal;  // killed by this signal
    bool timed_out = false;     // the signal was exec's timeout
};

// A spawned process and the group it leads.
class Child {
public:
    explicit Child(pid_t pid);

    [[nodiscard]] pid_t pid() const { return pid_; }
    // Sends `sig` to the process group, unless the leader has been reaped:
    // its number may then belong to a new process. Returns false then.
    bool signal_group(int sig);
    // exec's timeout: SIGKILL to the group, remembered for the exit report.
    void kill_for_timeout();

    // An eventfd that becomes readable once the process has been reaped
    // (and stays so: nobody reads it).
    [[nodiscard]] int exited_fd() const { return exited_.get(); }
    [[nodiscard]] std::optional<ExitStatus> exit_status() const;
    [[nodiscard]] bool running() const { return !exit_status().has_value(); }
    void wait() const;

    // Called by the reaper: collects the zombie (or takes the status
    // already collected) and publishes its status.
    void reap(std::optional<int> collected = std::nullopt);

private:
    const pid_t pid_;
    UniqueFd exited_;
    mutable std::mutex mutex_;
    mutable std::condition_variable exited_cv_;
    std::optional<int> wait_status_;
    bool timed_out_ = false;
};

class Reaper {
public:
    static Reaper& instance();

    // Starts a child that runs `in_child(arg)`, which must exec or _exit
    // and never return. The child shares the agent's memory until then
    // (clone(CLONE_VM | CLONE_VFORK), as posix_spawn does; the caller is
    // suspended meanwhile): a fork() would copy the page tables of the
    // whole agent, output logs included — 4 ms at 16 MiB, 110 ms at 1 GiB
    // measured. So `in_child` may only make raw system calls, write
    // nothing but its own stack, and leave glibc's set*id wrappers alone
    // (they signal every thread of the process). All signals are blocked
    // around the clone; the child must reset handlers before unblocking.
    // (Sanitizer builds fork instead: their runtime does not expect this.)
    Result<std::shared_ptr<Child>> start_child(int (*in_child)(void*), void* arg);

    // Tests: a pause between a child's start and its registration, so that
    // it can end in between.
    void set_registration_delay_for_tests(std::chrono::microseconds delay) { registration_delay_ = delay; }

    // SIGKILLs the child's group at `when` (unless it is gone by then).
    void kill_at(std::chrono::steady_clock::time_point when, std::weak_ptr<Child> child);

private:
    Reaper();
    void reap_forever();
    void enforce_deadlines();

    std::mutex mutex_;
    std::condition_variable children_cv_;
    std::unordered_map<pid_t, std::shared_ptr<Child>> children_;
    std::uint64_t generation_ = 0;                // registrations so far: wakes the reaper from "no children"
    int starting_ = 0;                            // start_child() calls between their clone and registration
    std::unordered_map<pid_t, int> early_exits_;  // wait statuses for them to claim
    std::atomic<std::chrono::microseconds> registration_delay_{std::chrono::microseconds(0)};

    std::mutex deadline_mutex_;
    std::condition_variable deadline_cv_;
    std::multimap<std::chrono::steady_clock::time_point, std::weak_ptr<Child>> deadlines_;
    std::size_t sweep_at_ = 1024;
};

}  // namespace sbx::agent

#include "guest-agent/exec/reaper.hpp"

#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include "base/log.hpp"

namespace sbx::agent {

// ---- Child ------------------------------------------------------------------

Child::Child(pid_t pid) : pid_(pid), exited_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

bool Child::signal_group(int sig) {
    std::lock_guard lock(mutex_);
    if (wait_status_) {
        return false;
    }
    ::kill(-pid_, sig);
    return true;
}

void Child::kill_for_timeout() {
    std::lock_guard lock(mutex_);
    if (!wait_status_) {
        ::kill(-pid_, SIGKILL);
        timed_out_ = true;
    }
}

std::optional<ExitStatus> Child::exit_status() const {
    std::lock_guard lock(mutex_);
    if (!wait_status_) {
        return std::nullopt;
    }
    ExitStatus status;
    if (WIFSIGNALED(*wait_status_)) {
        status.signal = WTERMSIG(*wait_status_);
        // A process that ended on its own as its timeout fired did not time out.
        status.timed_out = timed_out_ && *status.signal == SIGKILL;
    } else {
        status.code = WEXITSTATUS(*wait_status_);
    }
    return status;
}

void Child::wait() const {
    std::unique_lock lock(mutex_);
    exited_cv_.wait(lock, [&] { return wait_status_.has_value(); });
}

void Child::reap(std::optional<int> collected) {
    int status = collected.value_or(0);
    {
        std::lock_guard lock(mutex_);
        while (!collected && ::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        wait_status_ = status;
    }
    exited_cv_.notify_all();
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(exited_.get(), &one, sizeof one);
}

// ---- Reaper -----------------------------------------------------------------

Reaper& Reaper::instance() {
    // Leaked on purpose: its threads block in waitid() for the life of the
    // process, and children may exit during static destruction.
    static Reaper* const reaper = new Reaper();  // NOLINT(cppcoreguidelines-owning-memory)
    return *reaper;
}

Reaper::Reaper() {
    // Orphaned descendants come to us instead of init, and get reaped.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    std::thread([this] { reap_forever(); }).detach();
    std::thread([this] { enforce_deadlines(); }).detach();
}

Result<std::shared_ptr<Child>> Reaper::start_child(int (*in_child)(void*), void* arg) {
    {
        std::lock_guard lock(mutex_);
        ++starting_;
    }
    int start_errno = 0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::_exit(in_child(arg));
    }
    start_errno = errno;
#else
    constexpr std::size_t kStack = std::size_t{256} * 1024;
    void* stack =
        ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    pid_t pid = -1;
    start_errno = errno;
    if (stack != MAP_FAILED) {
        sigset_t all, saved;
        sigfillset(&all);
        ::pthread_sigmask(SIG_SETMASK, &all, &saved);
        pid = ::clone(in_child, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
        start_errno = errno;
        ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
        ::munmap(stack, kStack);  // unused now: CLONE_VFORK returns once the child has exec'd or exited
    }
#endif
    if (auto delay = registration_delay_.load(); delay.count() > 0) {
        std::this_thread::sleep_for(delay);
    }
    std::lock_guard lock(mutex_);
    --starting_;
    std::shared_ptr<Child> child;
    if (pid > 0) {
        child = std::make_shared<Child>(pid);
        if (auto early = early_exits_.find(pid); early != early_exits_.end()) {
            child->reap(early->second);  // it ended before it was registered
            early_exits_.erase(early);
        } else {
            children_.emplace(pid, child);
            ++generation_;
            children_cv_.notify_one();
        }
    }
    if (starting_ == 0) {
        early_exits_.clear();  // what no start claimed were orphans
    }
    if (!child) {
        return errno_error("starting a process", start_errno);
    }
    return child;
}

void Reaper::kill_at(std::chrono::steady_clock::time_point when, std::weak_ptr<Child> child) {
    std::lock_guard lock(deadline_mutex_);
    // Children that ended long before their deadline leave expired entries:
    // sweep them whenever the queue has doubled, so it stays proportional
    // to the processes that exist.
    if (deadlines_.size() >= sweep_at_) {
        std::erase_if(deadlines_, [](const auto& entry) { return entry.second.expired(); });
        sweep_at_ = std::max<std::size_t>(1024, 2 * deadlines_.size());
    }
    deadlines_.emplace(when, std::move(child));
    deadline_cv_.notify_one();
}

void Reaper::reap_forever() {
    while (true) {
        std::uint64_t seen = 0;
        {
            std::lock_guard lock(mutex_);
            seen = generation_;
        }
        // Peek first (WNOWAIT): the child's lock is taken before its pid
        // is released, so a signal_group() can never hit a reused pid.
        siginfo_t info{};
        if (::waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) < 0) {
            if (errno == ECHILD) {
                std::unique_lock lock(mutex_);
                children_cv_.wait(lock, [&] { return generation_ != seen; });
            } else if (errno != EINTR) {
                log::error("sbx-agent: waitid: {}", std::strerror(errno));
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            continue;
        }
        std::shared_ptr<Child> child;
        {
            std::lock_guard lock(mutex_);
            if (auto it = children_.find(info.si_pid); it != children_.end()) {
                child = std::move(it->second);
                children_.erase(it);
            } else {
                // An orphan re-parented to us, or a child whose start_child()
                // has not registered it yet: that one will claim its status.
                int status = 0;
                ::waitpid(info.si_pid, &status, 0);
                if (starting_ > 0) {
                    early_exits_[info.si_pid] = status;
                }
            }
        }
        if (child) {
            child->reap();
        }
    }
}

void Reaper::enforce_deadlines() {
    std::unique_lock lock(deadline_mutex_);
    while (true) {
        if (deadlines_.empty()) {
            deadline_cv_.wait(lock);
            continue;
        }
        auto first = deadlines_.begin();
        if (std::chrono::steady_clock::now() < first->first) {
            deadline_cv_.wait_until(lock, first->first);
            continue;
        }
        auto child = first->second.lock();
        deadlines_.erase(first);
        if (child) {
            lock.unlock();
            child->kill_for_timeout();
            lock.lock();
        }
    }
}

}  // namespace sbx::agent

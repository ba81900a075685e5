#include "guest-agent/exec/process_table.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <system_error>

#include "guest-agent/exec/output_pump.hpp"

namespace sbx::agent {
namespace {

// The order in which detached processes finished, across tables.
std::uint64_t next_finish_order() {
    static std::atomic<std::uint64_t> finished{0};
    return ++finished;
}

std::int64_t unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Random, so an id kept by a client across an agent restart never names
// another process.
std::string new_id() {
    std::uint64_t bits = 0;
    if (::getrandom(&bits, sizeof bits, 0) != sizeof bits) {
        static std::atomic<std::uint64_t> fallback{0};
        bits = static_cast<std::uint64_t>(unix_ms()) * 1000003 + ++fallback;
    }
    return fmt::format("p{:016x}", bits);
}

}  // namespace

// ---- DetachedProcess ---------------------------------------------------------

DetachedProcess::DetachedProcess(std::string id, Json command, SpawnedProcess process,
                                 std::size_t log_capacity)
    : id_(std::move(id)),
      command_(std::move(command)),
      started_at_ms_(unix_ms()),
      child_(process.child),
      process_(std::move(process)),
      had_stdin_(static_cast<bool>(process_.in)),
      log_(log_capacity),
      pump_([this] { pump(); }) {}

DetachedProcess::~DetachedProcess() {
    child_->signal_group(SIGKILL);
    pump_.join();
}

Result<DetachedProcess::StdinWrite> DetachedProcess::write_stdin(std::span<const std::uint8_t> bytes, bool eof) {
    std::lock_guard lock(stdin_mutex_);
    if (!had_stdin_) {
        return make_error(fmt::format("process {} was started without stdin (exec with \"stdin\": true)", id_));
    }
    StdinWrite out;
    while (process_.in && out.written < bytes.size()) {
        const ssize_t n = ::write(process_.in.get(), bytes.data() + out.written, bytes.size() - out.written);
        if (n >= 0) {
            out.written += static_cast<std::size_t>(n);
        } else if (errno == EAGAIN) {
            break;  // the pipe is full: the process has not read it yet
        } else if (errno != EINTR) {
            process_.in.reset();  // EPIPE: the process closed its stdin; what comes is dropped
        }
    }
    if (eof && out.written == bytes.size()) {
        process_.in.reset();
    }
    out.open = static_cast<bool>(process_.in);
    return out;
}

void DetachedProcess::pump() {
    pump_output(process_, [this](Channel channel, std::span<const std::uint8_t> bytes) {
        std::lock_guard lock(mutex_);
        log_.append(channel, bytes);
        notify_locked();
    });
    process_.terminal.reset();  // a pty is not kept while the record is
    child_->wait();
    std::lock_guard lock(mutex_);
    running_ = false;
    finish_order_ = next_finish_order();
    notify_locked();
}

void DetachedProcess::notify_locked() {
    const std::uint64_t one = 1;
    for (int fd : watchers_) {
        [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
    }
}

void DetachedProcess::watch(int event_fd) {
    std::lock_guard lock(mutex_);
    watchers_.insert(event_fd);
}

void DetachedProcess::unwatch(int event_fd) {
    std::lock_guard lock(mutex_);
    watchers_.erase(event_fd);
}

DetachedProcess::Snapshot DetachedProcess::snapshot() const {
    std::lock_guard lock(mutex_);
    Snapshot s;
    s.running = running_;
    if (!running_) {
        s.exit = child_->exit_status().value_or(ExitStatus{});
    }
    s.first_offset = log_.first_offset();
    s.end_offset = log_.end_offset();
    s.finish_order = finish_order_;
    return s;
}

std::vector<std::uint8_t> DetachedProcess::tail(std::size_t max_bytes) const {
    std::lock_guard lock(mutex_);
    return log_.tail(max_bytes);
}

DetachedProcess::Read DetachedProcess::read(std::uint64_t offset, std::size_t max_bytes) const {
    Read r;
    r.state = snapshot();  // before the bytes: running == false then means nothing more comes
    std::lock_guard lock(mutex_);
    if (offset < log_.first_offset()) {
        r.kind = Read::Gone;
        r.state.first_offset = log_.first_offset();
    } else if (offset < log_.end_offset()) {
        r.kind = Read::Data;
        r.piece = log_.read(offset, max_bytes);
    } else {
        r.kind = r.state.running ? Read::Wait : Read::End;
    }
    return r;
}

// ---- ProcessTable --------------------------------------------------------------

ProcessTable::~ProcessTable() {
    std::map<std::string, std::shared_ptr<DetachedProcess>, std::less<>> processes;
    {
        std::lock_guard lock(mutex_);
        processes.swap(processes_);
    }
    for (auto& [id, process] : processes) {
        process->signal_group(SIGKILL);  // all first, then wait for each
    }
}

std::vector<std::shared_ptr<DetachedProcess>> ProcessTable::evict_locked() {
    std::vector<std::pair<std::uint64_t, std::string>> exited;
    for (const auto& [id, process] : processes_) {
        auto s = process->snapshot();
        if (!s.running) {
            exited.emplace_back(s.finish_order, id);
        }
    }
    std::vector<std::shared_ptr<DetachedProcess>> evicted;
    if (exited.size() <= kMaxExited) {
        return evicted;
    }
    std::sort(exited.begin(), exited.end());
    for (std::size_t i = 0; i < exited.size() - kMaxExited; ++i) {
        auto it = processes_.find(exited[i].second);
        evicted.push_back(std::move(it->second));
        processes_.erase(it);
    }
    return evicted;
}

Result<std::shared_ptr<DetachedProcess>> ProcessTable::start(const ExecSpec& spec) {
    std::vector<std::shared_ptr<DetachedProcess>> evicted;
    {
        std::lock_guard lock(mutex_);
        evicted = evict_locked();
        std::size_t running = starting_;
        for (const auto& [id, process] : processes_) {
            running += process->snapshot().running ? 1 : 0;
        }
        if (running >= kMaxRunning) {
            return errno_error(fmt::format("{} detached processes are running already (the limit)", running),
                               EAGAIN);
        }
        ++starting_;  // spawning takes a while: hold a slot without the lock
    }
    auto spawned = spawn(spec.plan);
    std::lock_guard lock(mutex_);
    --starting_;
    if (!spawned) {
        return spawned.error();
    }
    auto child = spawned->child;
    std::shared_ptr<DetachedProcess> process;
    try {
        process = std::make_shared<DetachedProcess>(new_id(), spec.command, std::move(*spawned),
                                                    log_capacity_.load());
    } catch (const std::system_error& e) {  // no thread for its pump: no exception may leave a handler
        child->signal_group(SIGKILL);
        return errno_error(fmt::format("starting the output thread: {}", e.what()), EAGAIN);
    }
    processes_.emplace(process->id(), process);
    return process;
}

std::shared_ptr<DetachedProcess> ProcessTable::find(std::string_view id) {
    std::vector<std::shared_ptr<DetachedProcess>> evicted;  // destroyed after the lock is released
    std::lock_guard lock(mutex_);
    evicted = evict_locked();
    auto it = processes_.find(id);
    return it == processes_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<DetachedProcess>> ProcessTable::list() {
    std::vector<std::shared_ptr<DetachedProcess>> evicted;  // destroyed after the lock is released
    std::vector<std::shared_ptr<DetachedProcess>> out;
    std::lock_guard lock(mutex_);
    evicted = evict_locked();
    for (const auto& [id, process] : processes_) {
        out.push_back(process);
    }
    return out;
}

Result<void> ProcessTable::remove(std::string_view id) {
    std::shared_ptr<DetachedProcess> removed;
    std::lock_guard lock(mutex_);
    auto it = processes_.find(id);
    if (it == processes_.end()) {
        return errno_error(fmt::format("no detached process {}", id), ENOENT);
    }
    if (it->second->snapshot().running) {
        return errno_error(fmt::format("process {} is still running (signal it and wait for its exit)", id),
                           EBUSY);
    }
    removed = std::move(it->second);
    processes_.erase(it);
    return ok();
}

}  // namespace sbx::agent

// Detached processes and their retained output (docs/agent-protocol.md,
// "exec" → Detached, "proc_*"). Each detached process has a pump thread
// that moves its output into its OutputLog as it comes, so the process
// never waits for a client: a slow or absent reader only loses bytes older
// than the log's 16 MiB, never blocks the process beyond its pipe. Readers
// (proc_attach) take copies out under the lock and write to their own
// socket, and are woken through an eventfd each when the log grows.
//
// Limits: at most kMaxRunning running processes; of the exited ones the
// newest kMaxExited are kept, the others dropped by the next start(),
// find() or list() (which is all a client can observe).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

// output_log.hpp (frame.hpp) before messages.hpp, in a block of its own:
// FrameKind::Json would shadow messages.hpp's Json.
#include "guest-agent/exec/output_log.hpp"

#include "guest-agent/exec/exec_request.hpp"

namespace sbx::agent {

class DetachedProcess {
public:
    DetachedProcess(std::string id, Json command, SpawnedProcess process, std::size_t log_capacity);
    // Kills the process group if it still runs, and joins the pump.
    ~DetachedProcess();
    DetachedProcess(const DetachedProcess&) = delete;
    DetachedProcess& operator=(const DetachedProcess&) = delete;
    DetachedProcess(DetachedProcess&&) = delete;
    DetachedProcess& operator=(DetachedProcess&&) = delete;

    [[nodiscard]] const std::string& id() const { return id_; }
    [[nodiscard]] pid_t pid() const { return child_->pid(); }
    [[nodiscard]] const Json& command() const { return command_; }
    [[nodiscard]] std::int64_t started_at_ms() const { return started_at_ms_; }
    bool signal_group(int sig) { return child_->signal_group(sig); }

    // A consistent view: `running` stays true until the process has exited
    // and all of its output is in the log.
    struct Snapshot {
        bool running = true;
        ExitStatus exit;
        std::uint64_t first_offset = 0;
        std::uint64_t end_offset = 0;
        std::uint64_t finish_order = 0;  // among finished processes, oldest lowest
    };
    [[nodiscard]] Snapshot snapshot() const;
    [[nodiscard]] std::vector<std::uint8_t> tail(std::size_t max_bytes) const;

    // What a reader at `offset` gets next.
    struct Read {
        enum Kind { Data, Gone, Wait, End } kind = Wait;
        OutputLog::Piece piece;  // Data
        Snapshot state;
    };
    [[nodiscard]] Read read(std::uint64_t offset, std::size_t max_bytes) const;

    // Writes what the process's stdin pipe takes now, never blocking (0
    // when the pipe is full: the client sends the rest later); with `eof`,
    // closes it once all of `bytes` went. `open` false once it is closed,
    // by an eof or by the process (EPIPE). An error (bad_request) when it was
    // started without stdin.
    struct StdinWrite {
        std::size_t written = 0;
        bool open = true;
    };
    [[nodiscard]] Result<StdinWrite> write_stdin(std::span<const std::uint8_t> bytes, bool eof);

    // Readers' eventfds, written whenever the log grows or the process ends.
    void watch(int event_fd);
    void unwatch(int event_fd);

private:
    void pump();
    void notify_locked();

    const std::string id_;
    const Json command_;
    const std::int64_t started_at_ms_;
    std::shared_ptr<Child> child_;
    SpawnedProcess process_;

    std::mutex stdin_mutex_;  // process_.in: written by proc_stdin, never by the pump
    bool had_stdin_ = false;

    mutable std::mutex mutex_;
    OutputLog log_;
    bool running_ = true;
    std::uint64_t finish_order_ = 0;
    std::set<int> watchers_;

    std::thread pump_;  // last: starts once everything above exists
};

class ProcessTable {
public:
    static constexpr std::size_t kMaxRunning = 256;
    static constexpr std::size_t kMaxExited = 64;

    ProcessTable() = default;
    ~ProcessTable();  // kills what still runs
    ProcessTable(const ProcessTable&) = delete;
    ProcessTable& operator=(const ProcessTable&) = delete;
    ProcessTable(ProcessTable&&) = delete;
    ProcessTable& operator=(ProcessTable&&) = delete;

    // Spawns a detached process. Errors: EAGAIN when kMaxRunning run
    // already (the protocol's "limit"), else spawn()'s.
    [[nodiscard]] Result<std::shared_ptr<DetachedProcess>> start(const ExecSpec& spec);
    [[nodiscard]] std::shared_ptr<DetachedProcess> find(std::string_view id);
    [[nodiscard]] std::vector<std::shared_ptr<DetachedProcess>> list();
    // Forgets an exited process: ENOENT when unknown, EBUSY while it runs.
    [[nodiscard]] Result<void> remove(std::string_view id);

    // For tests: a smaller log per process.
    void set_log_capacity(std::size_t bytes) { log_capacity_ = bytes; }

private:
    // Drops the oldest exited processes beyond kMaxExited; returns them so
    // the caller destroys them outside the lock.
    std::vector<std::shared_ptr<DetachedProcess>> evict_locked();

    std::mutex mutex_;
    std::map<std::string, std::shared_ptr<DetachedProcess>, std::less<>> processes_;
    std::size_t starting_ = 0;  // slots held by spawns in progress
    std::atomic<std::size_t> log_capacity_{OutputLog::kCapacity};
};

}  // namespace sbx::agent

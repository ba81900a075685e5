// The host side of exec and proc_* (docs/agent-protocol.md): blocking calls
// on an AgentClient's connection, output streamed to a callback as it
// arrives or collected. One call at a time per AgentClient; run concurrent
// commands on concurrent connections.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "guest-agent/client/agent_client.hpp"

namespace sbx::agent {

struct PtySize {
    int rows = 24;
    int cols = 80;
};

// Every member has an initializer, so designated initializers may name
// just the fields they need.
struct ExecRequest {
    std::vector<std::string> argv{};  // the program (looked up in PATH) and its arguments, or
    std::string shell{};              // a command line for /bin/sh -c
    std::map<std::string, std::string> env{};
    std::string cwd{};   // "": the user's home
    std::string user{};  // "": the agent's default user (root unless sbx-agent --default-user)
    // exec(): sent as the process's stdin, then EOF. ExecSession: set
    // stdin_open instead and write it yourself; exec_detached: stdin_open
    // keeps a pipe that proc_stdin writes. Neither: /dev/null.
    std::optional<std::string> stdin_data{};
    bool stdin_open = false;
    std::chrono::milliseconds timeout{0};  // 0: none
    std::optional<PtySize> pty{};          // stdout and stderr then arrive as one stream on stdout
};

struct ExitInfo {
    std::optional<int> code;
    std::optional<int> signal;
    bool timed_out = false;
};

struct ExecResult : ExitInfo {
    int pid = 0;
    std::string stdout_data, stderr_data;  // empty when a sink took the output
    bool output_truncated = false;         // more than kMaxCollectedOutput on a channel
};

// Collected output per channel is capped (the guest is not trusted to be
// reasonable); use a sink for more.
inline constexpr std::size_t kMaxCollectedOutput = 256 << 20;

// Output as it arrives: channel (1 stdout, 2 stderr), the offset of the
// first byte (per channel for exec, in the log for proc_attach), the bytes.
using OutputSink = std::function<void(Channel, std::uint64_t offset, std::span<const std::uint8_t>)>;

// The request's fields as the protocol spells them.
[[nodiscard]] Json exec_fields(const ExecRequest& request, bool detach);

// An attached exec in progress, for interactive use: stdin, signals and
// resizes may be sent from any thread while one thread reads events.
class ExecSession {
public:
    // Sends the request and waits for "started".
    static Result<ExecSession> start(AgentClient& client, const ExecRequest& request);

    [[nodiscard]] int pid() const { return pid_; }
    [[nodiscard]] Result<void> write_stdin(std::span<const std::uint8_t> bytes);
    [[nodiscard]] Result<void> close_stdin();
    [[nodiscard]] Result<void> signal(int sig);
    [[nodiscard]] Result<void> resize(int rows, int cols);

    struct Event {
        enum Kind { Output, Eof, Exit } kind = Output;
        Channel channel = Channel::Stdout;
        std::uint64_t offset = 0;
        std::vector<std::uint8_t> data;
        ExitInfo exit;
    };
    // The next output, EOF or the exit (after which the connection is free
    // for the next request). Checked: output only on channels 1 and 2, at
    // contiguous offsets from 0, none after its EOF. Waits without limit
    // for a command without a timeout (it may be silent for hours; the
    // agent sends no heartbeats), else until its timeout plus the reply
    // timeout. Any error abandons the connection.
    [[nodiscard]] Result<Event> next();

private:
    ExecSession(AgentClient& client, int pid, std::optional<Clock::time_point> deadline)
        : client_(&client), pid_(pid), deadline_(deadline) {}
    [[nodiscard]] Result<Event> check(Event event);

    AgentClient* client_;
    int pid_;
    std::optional<Clock::time_point> deadline_;
    std::uint64_t stdin_offset_ = 0;
    std::uint64_t next_offset_[2] = {};  // stdout, stderr
    bool eof_[2] = {};
};

// Runs a command to its end. With a sink, output goes there as it arrives
// and is not collected.
[[nodiscard]] Result<ExecResult> exec(AgentClient& client, const ExecRequest& request,
                                      const OutputSink& sink = {});

struct DetachedProcessRef {
    std::string id;
    int pid = 0;
};
[[nodiscard]] Result<DetachedProcessRef> exec_detached(AgentClient& client, const ExecRequest& request);

struct AttachResult {
    std::uint64_t offset = 0;      // where the output sent began
    std::uint64_t end_offset = 0;  // reattach from here to continue with the next byte
    bool running = false;
    ExitInfo exit;  // when !running
};
// A detached process's output from `offset`: with `follow` until it exits
// (waiting without limit between frames: the process may be silent), else
// what is there now (each frame within the reply timeout). The output must
// arrive at contiguous log offsets from `offset`. offset_gone comes back
// as an Error whose first_offset_of() is the oldest offset still retained.
[[nodiscard]] Result<AttachResult> attach(AgentClient& client, std::string_view id, std::uint64_t offset,
                                          bool follow, const OutputSink& sink);
[[nodiscard]] std::optional<std::uint64_t> first_offset_of(const Error& offset_gone);

[[nodiscard]] Result<Json> proc_status(AgentClient& client, std::string_view id);
// {"type":"result","processes":[...]}, batches joined; more than
// kMaxProcListEntries entries is an error.
inline constexpr std::size_t kMaxProcListEntries = 4096;  // the agent keeps at most 256 + 64
[[nodiscard]] Result<Json> proc_list(AgentClient& client);
// Ok(false) when the process had exited already and nothing was sent.
[[nodiscard]] Result<bool> proc_signal(AgentClient& client, std::string_view id, int sig);
[[nodiscard]] Result<void> proc_remove(AgentClient& client, std::string_view id);
// Writes to a detached process's stdin what its pipe takes now (in
// proc_stdin requests of kStdinChunk bytes, until one is not taken whole);
// with `eof`, closes it once all went.
inline constexpr std::size_t kStdinChunk = 32 * 1024;
struct StdinWritten {
    std::uint64_t written = 0;
    bool open = true;  // false: closed (by eof, or by the process)
};
[[nodiscard]] Result<StdinWritten> proc_stdin(AgentClient& client, std::string_view id,
                                              std::span<const std::uint8_t> bytes, bool eof);

}  // namespace sbx::agent

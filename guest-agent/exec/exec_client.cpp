#include "guest-agent/exec/exec_client.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/base64.hpp"

namespace sbx::agent {
namespace {

// Exit statuses and signal numbers (WEXITSTATUS, WTERMSIG), process ids.
constexpr std::int64_t kMaxExitCode = 255;
constexpr std::int64_t kMaxSignal = 127;
constexpr std::size_t kMaxProcessId = 64;

Result<ExitInfo> parse_exit(const Json& message) {
    auto sig = reply_optional_i64(message, "signal", 1, kMaxSignal);
    auto code = reply_optional_i64(message, "code", 0, kMaxExitCode);
    auto timed_out = reply_optional_bool(message, "timed_out");
    if (!sig || !code || !timed_out) {
        return !sig ? sig.error() : !code ? code.error() : timed_out.error();
    }
    ExitInfo exit;
    if (*sig) {
        exit.signal = static_cast<int>(**sig);
    } else if (*code) {
        exit.code = static_cast<int>(**code);
    }
    exit.timed_out = timed_out->value_or(false);
    return exit;
}

Result<int> parse_pid(const Json& message) {
    auto pid = reply_i64(message, "pid", 1, INT32_MAX);
    if (!pid) {
        return pid.error();
    }
    return static_cast<int>(*pid);
}

// Ids are "p" and hex digits (docs/agent-protocol.md, "exec"); anything
// printable and short is taken, so it can be shown and sent back.
Result<std::string> parse_process_id(const Json& message) {
    auto id = reply_string(message, "id");
    if (!id) {
        return id.error();
    }
    const bool ok_chars = std::all_of(id->begin(), id->end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
    if (id->empty() || id->size() > kMaxProcessId || !ok_chars) {
        return malformed_reply("\"id\" is not a process id");
    }
    return id;
}

// Sends a request and reads the reply, which must be of `type`. Errors keep
// offset_gone's first_offset.
Result<Json> call_expecting(AgentClient& client, std::string_view op, Json fields, std::string_view type) {
    return client.expect(client.call(op, std::move(fields)), type);
}

}  // namespace

Json exec_fields(const ExecRequest& request, bool detach) {
    Json fields = Json::object();
    if (!request.shell.empty()) {
        fields["shell"] = request.shell;
    } else {
        fields["argv"] = request.argv;
    }
    if (!request.env.empty()) {
        fields["env"] = request.env;
    }
    if (!request.cwd.empty()) {
        fields["cwd"] = request.cwd;
    }
    if (!request.user.empty()) {
        fields["user"] = request.user;
    }
    if (request.stdin_data || request.stdin_open) {
        fields["stdin"] = true;
    }
    if (request.timeout.count() > 0) {
        fields["timeout_ms"] = request.timeout.count();
    }
    if (request.pty) {
        fields["pty"] = Json{{"rows", request.pty->rows}, {"cols", request.pty->cols}};
    }
    if (detach) {
        fields["detach"] = true;
    }
    return fields;
}

Result<ExecSession> ExecSession::start(AgentClient& client, const ExecRequest& request) {
    auto started = call_expecting(client, "exec", exec_fields(request, false), "started");
    if (!started) {
        return started.error();
    }
    auto pid = parse_pid(*started);
    if (!pid) {
        return client.abandon(pid.error().context("exec"));
    }
    // The agent kills the process at its timeout; its last output and the
    // exit follow within the reply timeout.
    std::optional<Clock::time_point> deadline;
    if (request.timeout.count() > 0 && client.reply_timeout().count() > 0) {
        deadline = Clock::now() + request.timeout + client.reply_timeout();
    }
    return ExecSession(client, *pid, deadline);
}

Result<void> ExecSession::write_stdin(std::span<const std::uint8_t> bytes) {
    auto r = client_->stream().write_data(Channel::Stdin, stdin_offset_, bytes);
    stdin_offset_ += bytes.size();
    return r;
}

Result<void> ExecSession::close_stdin() {
    return client_->stream().write_eof(Channel::Stdin);
}

Result<void> ExecSession::signal(int sig) {
    return client_->stream().write_message(Json{{"type", "signal"}, {"signal", sig}});
}

Result<void> ExecSession::resize(int rows, int cols) {
    return client_->stream().write_message(Json{{"type", "resize"}, {"rows", rows}, {"cols", cols}});
}

Result<ExecSession::Event> ExecSession::next() {
    auto frame = client_->read_frame(deadline_);
    if (!frame) {
        return frame.error();
    }
    Event event;
    switch (frame->kind) {
        case FrameKind::Data:
            event.kind = Event::Output;
            event.channel = frame->channel;
            event.offset = frame->offset;
            event.data = std::move(frame->data);
            return check(std::move(event));
        case FrameKind::Eof:
            event.kind = Event::Eof;
            event.channel = frame->channel;
            return check(std::move(event));
        case FrameKind::Json:
            break;
    }
    auto message = client_->reply_of(*frame);
    if (!message) {
        return message.error();
    }
    const std::string type = reply_type(*message);
    if (type != "exit") {
        return client_->abandon(
            malformed_reply(fmt::format("unexpected \"{}\" message during exec", printable(type, 64))));
    }
    auto exit = parse_exit(*message);
    if (!exit) {
        return client_->abandon(exit.error().context("exec"));
    }
    event.kind = Event::Exit;
    event.exit = *exit;
    return event;
}

// Output of an attached exec: stdout and stderr each count from 0
// (docs/agent-protocol.md, "exec").
Result<ExecSession::Event> ExecSession::check(Event event) {
    if (event.channel != Channel::Stdout && event.channel != Channel::Stderr) {
        return client_->abandon(
            malformed_reply(fmt::format("exec output on channel {}", static_cast<int>(event.channel))));
    }
    const int i = event.channel == Channel::Stdout ? 0 : 1;
    if (eof_[i]) {
        return client_->abandon(
            malformed_reply(fmt::format("exec output on channel {} after its EOF", static_cast<int>(event.channel))));
    }
    if (event.kind == Event::Eof) {
        eof_[i] = true;
        return event;
    }
    if (event.offset != next_offset_[i]) {
        return client_->abandon(malformed_reply(fmt::format("exec output on channel {} at offset {}, expected {}",
                                                            static_cast<int>(event.channel), event.offset,
                                                            next_offset_[i])));
    }
    next_offset_[i] += event.data.size();
    return event;
}

Result<ExecResult> exec(AgentClient& client, const ExecRequest& request, const OutputSink& sink) {
    auto session = ExecSession::start(client, request);
    if (!session) {
        return session.error();
    }
    // Stdin goes from its own thread: the agent may have to send output
    // before it can take more input (`cat` of something large).
    std::thread feeder;
    std::mutex fed_mutex;
    std::condition_variable fed_changed;
    bool fed = false;
    if (request.stdin_data) {
        feeder = std::thread([&] {
            const auto* bytes = reinterpret_cast<const std::uint8_t*>(request.stdin_data->data());
            if (session->write_stdin(std::span(bytes, request.stdin_data->size()))) {
                [[maybe_unused]] auto r = session->close_stdin();
            }
            std::lock_guard lock(fed_mutex);
            fed = true;
            fed_changed.notify_all();
        });
    }
    ExecResult result;
    result.pid = session->pid();
    Result<void> outcome = ok();
    while (true) {
        auto event = session->next();
        if (!event) {
            outcome = event.error();
            break;
        }
        if (event->kind == ExecSession::Event::Exit) {
            static_cast<ExitInfo&>(result) = event->exit;
            break;
        }
        if (event->kind != ExecSession::Event::Output) {
            continue;
        }
        if (sink) {
            sink(event->channel, event->offset, event->data);
            continue;
        }
        std::string& out = event->channel == Channel::Stderr ? result.stderr_data : result.stdout_data;
        const std::size_t room = kMaxCollectedOutput - std::min(out.size(), kMaxCollectedOutput);
        result.output_truncated |= event->data.size() > room;
        out.append(event->data.begin(),
                   event->data.begin() + static_cast<std::ptrdiff_t>(std::min(room, event->data.size())));
    }
    if (feeder.joinable()) {
        // Stdin the process never read: the agent reads and drops the rest
        // (docs/agent-protocol.md, exec), so the feeder ends and the
        // connection stays in step. One that stops taking it within the
        // reply timeout would keep the feeder blocked: end the connection.
        bool done = false;
        if (outcome) {
            std::unique_lock lock(fed_mutex);
            const auto is_fed = [&] { return fed; };
            if (const auto limit = client.reply_timeout(); limit.count() == 0) {
                fed_changed.wait(lock, is_fed);
                done = true;
            } else {
                done = fed_changed.wait_for(lock, limit, is_fed);
            }
        }
        if (!done) {
            client.abandon();
        }
        feeder.join();
    }
    if (!outcome) {
        return outcome.error();
    }
    return result;
}

Result<DetachedProcessRef> exec_detached(AgentClient& client, const ExecRequest& request) {
    auto reply = call_expecting(client, "exec", exec_fields(request, true), "result");
    if (!reply) {
        return reply.error();
    }
    auto id = parse_process_id(*reply);
    auto pid = parse_pid(*reply);
    if (!id || !pid) {
        return (!id ? id.error() : pid.error()).context("exec --detach");
    }
    return DetachedProcessRef{*id, *pid};
}

Result<AttachResult> attach(AgentClient& client, std::string_view id, std::uint64_t offset, bool follow,
                            const OutputSink& sink) {
    auto attached = call_expecting(client, "proc_attach",
                                   Json{{"id", id}, {"offset", offset}, {"follow", follow}}, "attached");
    if (!attached) {
        return attached.error();
    }
    auto from = reply_u64(*attached, "offset");
    auto end = reply_u64(*attached, "end_offset");
    auto running = reply_bool(*attached, "running");
    if (!from || !end || !running) {
        return client.abandon((!from ? from.error() : !end ? end.error() : running.error()).context("proc_attach"));
    }
    if (*from != offset || *end < offset) {
        return client.abandon(malformed_reply(
            fmt::format("proc_attach from {} answered with offset {}, end_offset {}", offset, *from, *end)));
    }
    AttachResult result;
    result.offset = *from;
    std::uint64_t pos = *from;
    while (true) {
        auto frame = client.read_frame(follow ? std::nullopt : client.reply_deadline());
        if (!frame) {
            return frame.error();
        }
        if (frame->kind == FrameKind::Data) {
            const bool channel_ok = frame->channel == Channel::Stdout || frame->channel == Channel::Stderr;
            // Without follow, no further than the end the agent announced.
            if (!channel_ok || frame->offset != pos || (!follow && frame->data.size() > *end - pos)) {
                return client.abandon(malformed_reply(fmt::format(
                    "attach output on channel {} at offset {} ({} bytes), expected offset {}{}",
                    static_cast<int>(frame->channel), frame->offset, frame->data.size(), pos,
                    follow ? std::string() : fmt::format(" up to {}", *end))));
            }
            pos += frame->data.size();
            if (sink) {
                sink(frame->channel, frame->offset, frame->data);
            }
            continue;
        }
        if (frame->kind != FrameKind::Json) {
            return client.abandon(malformed_reply("an EOF frame in proc_attach"));
        }
        auto message = client.reply_of(*frame);
        if (!message) {
            return message.error();
        }
        const std::string type = reply_type(*message);
        if (type != "exit" && type != "result") {
            return client.abandon(
                malformed_reply(fmt::format("unexpected \"{}\" message in proc_attach", printable(type, 64))));
        }
        auto end_offset = reply_u64(*message, "end_offset");
        auto still = reply_bool(*message, "running");
        auto exit = parse_exit(*message);
        if (!end_offset || !still || !exit) {
            return client.abandon(
                (!end_offset ? end_offset.error() : !still ? still.error() : exit.error()).context("proc_attach"));
        }
        // The end is where the output sent stopped: reattaching there
        // continues with the next byte.
        if (*end_offset != pos) {
            return client.abandon(malformed_reply(
                fmt::format("proc_attach ended at end_offset {} after output up to {}", *end_offset, pos)));
        }
        result.end_offset = pos;
        result.running = *still;
        if (!result.running) {
            result.exit = *exit;
        }
        return result;
    }
}

std::optional<std::uint64_t> first_offset_of(const Error& offset_gone) {
    const std::string& m = offset_gone.message;
    auto at = m.rfind(kFirstOffsetMark);
    if (at == std::string::npos) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    const char* begin = m.data() + at + kFirstOffsetMark.size();
    auto [end, ec] = std::from_chars(begin, m.data() + m.size(), value);
    if (ec != std::errc()) {
        return std::nullopt;
    }
    return value;
}

Result<Json> proc_status(AgentClient& client, std::string_view id) {
    return call_expecting(client, "proc_status", Json{{"id", id}}, "result");
}

Result<Json> proc_list(AgentClient& client) {
    if (auto r = client.send_request("proc_list"); !r) {
        return r.error();
    }
    Json all = Json::array();
    while (true) {
        auto reply = client.read_reply();
        if (!reply) {
            return reply;
        }
        const std::string type = reply_type(*reply);
        auto batch = reply->find("processes");
        const bool last = type == "result";
        // A batch before the last is never empty: no endless stream of them.
        if ((!last && type != "processes") || batch == reply->end() || !batch->is_array() ||
            (!last && batch->empty())) {
            return client.abandon(malformed_reply("unexpected reply to proc_list"));
        }
        if (all.size() + batch->size() > kMaxProcListEntries) {
            return client.abandon(malformed_reply(fmt::format("over {} processes listed", kMaxProcListEntries)));
        }
        for (auto& entry : *batch) {
            if (!entry.is_object()) {
                return client.abandon(malformed_reply("a proc_list entry that is not an object"));
            }
            all.push_back(std::move(entry));
        }
        if (last) {
            (*reply)["processes"] = std::move(all);
            return reply;
        }
    }
}

Result<bool> proc_signal(AgentClient& client, std::string_view id, int sig) {
    auto reply = call_expecting(client, "proc_signal", Json{{"id", id}, {"signal", sig}}, "result");
    if (!reply) {
        return reply.error();
    }
    auto running = reply_bool(*reply, "running");
    if (!running) {
        return client.abandon(running.error().context("proc_signal"));
    }
    return *running;
}

Result<StdinWritten> proc_stdin(AgentClient& client, std::string_view id, std::span<const std::uint8_t> bytes,
                                bool eof) {
    StdinWritten out;
    do {
        const auto chunk = bytes.subspan(out.written, std::min(kStdinChunk, bytes.size() - out.written));
        const bool last = out.written + chunk.size() == bytes.size();
        const std::string_view text(reinterpret_cast<const char*>(chunk.data()), chunk.size());
        auto reply = call_expecting(client, "proc_stdin",
                                    Json{{"id", id}, {"data", base64_encode(text)}, {"eof", eof && last}}, "result");
        if (!reply) {
            return reply.error();
        }
        auto written = reply_u64(*reply, "written", chunk.size());
        auto open = reply_bool(*reply, "open");
        if (!written || !open) {
            return client.abandon(make_error("proc_stdin: a reply without written (at most what was sent) and open"));
        }
        out.written += *written;
        out.open = *open;
        if (*written < chunk.size()) {
            break;  // the pipe is full (or closed)
        }
    } while (out.open && out.written < bytes.size());
    return out;
}

Result<void> proc_remove(AgentClient& client, std::string_view id) {
    auto reply = call_expecting(client, "proc_remove", Json{{"id", id}}, "result");
    if (!reply) {
        return reply.error();
    }
    return ok();
}

}  // namespace sbx::agent

// The proc_* ops on detached processes (docs/agent-protocol.md,
// "proc_attach", "proc_status, proc_list, proc_signal, proc_stdin, proc_remove").
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <csignal>

#include "base/base64.hpp"
#include "guest-agent/exec/exec_ops.hpp"
#include "guest-agent/exec/process_table.hpp"

namespace sbx::agent {
namespace {

constexpr std::size_t kTailBytes = 4096;
// One proc_stdin's data, decoded: its base64 inside a JSON frame (kMaxJsonBody).
constexpr std::size_t kMaxStdinBytes = 32 * 1024;

Result<void> unknown_process(Session& session, std::string_view id) {
    return reply_error(session, errno_error(fmt::format("no detached process \"{}\"", id), ENOENT));
}

Result<void> offset_gone(Session& session, std::uint64_t offset, std::uint64_t first_offset) {
    Json error = error_message(code::kOffsetGone,
                               fmt::format("offset {} is no longer retained; the first retained offset is {}",
                                           offset, first_offset));
    error["first_offset"] = first_offset;
    return session.stream().write_message(error);
}

// Looks the "id" up; on failure the error has been sent and nullptr returned.
Result<std::shared_ptr<DetachedProcess>> find_process(Session& session, const Json& request) {
    auto id = get_string(request, "id");
    if (!id) {
        return id.error();
    }
    auto process = session.agent().processes().find(*id);
    if (!process) {
        if (auto r = unknown_process(session, *id); !r) {
            return r.error();
        }
    }
    return process;
}

void add_state(Json& out, const DetachedProcess::Snapshot& s) {
    out["running"] = s.running;
    if (!s.running) {
        out.update(exit_fields(s.exit));
    }
}

// Removes a reader's eventfd from the process however the attach ends.
class Watch {
public:
    Watch(DetachedProcess& process, int fd) : process_(process), fd_(fd) { process_.watch(fd_); }
    ~Watch() { process_.unwatch(fd_); }
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    Watch(Watch&&) = delete;
    Watch& operator=(Watch&&) = delete;

private:
    DetachedProcess& process_;
    int fd_;
};

Result<void> proc_attach(Session& session, const Json& request) {
    auto offset = get_int(request, "offset", 0);
    auto follow = get_bool(request, "follow", true);
    if (!offset || !follow) {
        return (!offset ? offset.error() : follow.error());
    }
    if (*offset < 0) {
        return make_error("\"offset\" must not be negative");
    }
    auto process = find_process(session, request);
    if (!process || !*process) {
        return process ? ok() : Result<void>(process.error());
    }
    FrameStream& stream = session.stream();
    UniqueFd grew(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!grew) {
        return sys_error("eventfd");
    }
    Watch watch(**process, grew.get());  // before the first look, so no growth is missed

    auto pos = static_cast<std::uint64_t>(*offset);
    const auto start = (*process)->snapshot();
    if (pos < start.first_offset) {
        return offset_gone(session, pos, start.first_offset);
    }
    if (pos > start.end_offset) {
        return make_error("offset {} is beyond the end of the output ({})", pos, start.end_offset);
    }
    if (auto r = stream.write_message(Json{{"type", "attached"},
                                           {"offset", pos},
                                           {"end_offset", start.end_offset},
                                           {"first_offset", start.first_offset},
                                           {"running", start.running}});
        !r) {
        return r;
    }
    // Without follow: what is there now, and no more (a busy process could
    // otherwise keep this going forever).
    const std::uint64_t stop_at = *follow ? UINT64_MAX : start.end_offset;
    while (true) {
        if (pos >= stop_at) {
            Json result{{"type", "result"}, {"end_offset", pos}};
            add_state(result, (*process)->snapshot());
            return stream.write_message(result);
        }
        auto next = (*process)->read(
            pos, static_cast<std::size_t>(std::min<std::uint64_t>(kMaxDataPayload, stop_at - pos)));
        switch (next.kind) {
            case DetachedProcess::Read::Data:
                if (auto r = stream.write_data(next.piece.channel, pos, next.piece.bytes); !r) {
                    return r;
                }
                pos += next.piece.bytes.size();
                break;
            case DetachedProcess::Read::Gone:
                // This reader fell more than the log's size behind.
                return offset_gone(session, pos, next.state.first_offset);
            case DetachedProcess::Read::End: {
                // "exit" reports an end this reader saw happen; a process that
                // had ended before the attach gets a "result" (the protocol doc).
                Json exit = exit_fields(next.state.exit);
                exit["type"] = start.running ? "exit" : "result";
                exit["end_offset"] = pos;
                exit["running"] = false;
                return stream.write_message(exit);
            }
            case DetachedProcess::Read::Wait: {
                // Wake on new output or the end, or stop when the client hangs
                // up: detaching never affects the process.
                pollfd fds[2] = {{grew.get(), POLLIN, 0}, {stream.fd(), POLLRDHUP, 0}};
                if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
                    return sys_error("poll");
                }
                if (fds[1].revents != 0) {
                    return make_error("client detached");
                }
                std::uint64_t count = 0;
                [[maybe_unused]] auto n = ::read(grew.get(), &count, sizeof count);
                break;
            }
        }
    }
}

// A command line (up to the 64 KiB of its request, several times that once
// escaped) as proc_status and proc_list show it: cut to about
// kCommandBytes, so that every reply fits a JSON message.
constexpr std::size_t kCommandBytes = 4096;

std::size_t json_size(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace).size();
}

Json command_summary(const Json& command) {
    if (json_size(command) <= kCommandBytes) {
        return command;
    }
    // Escaping can make a byte six ("\u0001"): keep a sixth.
    constexpr std::size_t kPiece = kCommandBytes / 6;
    Json out{{"command_truncated", true}};
    if (command.contains("shell")) {
        out["shell"] = command["shell"].get<std::string>().substr(0, kPiece);
        return out;
    }
    Json argv = Json::array();
    std::size_t used = 0;
    for (const auto& arg : command["argv"]) {
        std::string piece = arg.get<std::string>().substr(0, kPiece / 4);
        used += json_size(piece);
        if (used > kCommandBytes) {
            break;
        }
        argv.push_back(std::move(piece));
    }
    out["argv"] = std::move(argv);
    return out;
}

Result<void> proc_status(Session& session, const Json& request) {
    auto process = find_process(session, request);
    if (!process || !*process) {
        return process ? ok() : Result<void>(process.error());
    }
    const auto& p = **process;
    auto s = p.snapshot();
    auto tail = p.tail(kTailBytes);
    Json result{{"type", "result"},
                {"id", p.id()},
                {"pid", p.pid()},
                {"started_at", p.started_at_ms()},
                {"first_offset", s.first_offset},
                {"end_offset", s.end_offset},
                // Text: invalid UTF-8 (or a character cut at the start) is
                // replaced when the message is written.
                {"tail", std::string(tail.begin(), tail.end())}};
    add_state(result, s);
    result.update(command_summary(p.command()));
    return session.stream().write_message(result);
}

// Up to 320 processes do not fit one JSON message: batches of
// {"type":"processes"} before the final result, which has the last one.
Result<void> proc_list(Session& session, const Json&) {
    constexpr std::size_t kBatchBytes = 48 * 1024;
    Json batch = Json::array();
    std::size_t batch_bytes = 0;
    for (const auto& p : session.agent().processes().list()) {
        Json entry{{"id", p->id()}, {"pid", p->pid()}, {"started_at", p->started_at_ms()}};
        auto s = p->snapshot();
        add_state(entry, s);
        entry["end_offset"] = s.end_offset;
        entry.update(command_summary(p->command()));
        const std::size_t entry_bytes = json_size(entry);
        if (batch_bytes + entry_bytes > kBatchBytes && !batch.empty()) {
            if (auto r = session.stream().write_message(
                    Json{{"type", "processes"}, {"processes", std::move(batch)}});
                !r) {
                return r;
            }
            batch = Json::array();
            batch_bytes = 0;
        }
        batch.push_back(std::move(entry));
        batch_bytes += entry_bytes;
    }
    return session.stream().write_message(Json{{"type", "result"}, {"processes", std::move(batch)}});
}

Result<void> proc_signal(Session& session, const Json& request) {
    auto sig = valid_signal(request);
    if (!sig) {
        return make_error("\"signal\" must be a signal number from 1 to {}", NSIG - 1);
    }
    auto process = find_process(session, request);
    if (!process || !*process) {
        return process ? ok() : Result<void>(process.error());
    }
    // An exited process is not an error (the race is the client's to lose):
    // "running": false says nothing was sent.
    const bool sent = (*process)->signal_group(*sig);
    return session.stream().write_message(Json{{"type", "result"}, {"running", sent}});
}

// {"id","data"?:"<base64>","eof"?:false} -> {"written":N,"open":bool}
Result<void> proc_stdin(Session& session, const Json& request) {
    auto data = get_string(request, "data", "");
    auto eof = get_bool(request, "eof", false);
    if (!data || !eof) {
        return data ? eof.error() : data.error();
    }
    auto bytes = base64_decode(*data);
    if (!bytes) {
        return make_error("\"data\" must be padded base64");
    }
    if (bytes->size() > kMaxStdinBytes) {
        return make_error("\"data\" may carry at most {} bytes", kMaxStdinBytes);
    }
    auto process = find_process(session, request);
    if (!process || !*process) {
        return process ? ok() : Result<void>(process.error());
    }
    auto wrote = (*process)->write_stdin(
        std::span(reinterpret_cast<const std::uint8_t*>(bytes->data()), bytes->size()), *eof);
    if (!wrote) {
        return reply_error(session, wrote.error());
    }
    return session.stream().write_message(Json{{"type", "result"}, {"written", wrote->written}, {"open", wrote->open}});
}

Result<void> proc_remove(Session& session, const Json& request) {
    auto id = get_string(request, "id");
    if (!id) {
        return id.error();
    }
    if (auto r = session.agent().processes().remove(*id); !r) {
        return reply_error(session, r.error());
    }
    return session.stream().write_message(Json{{"type", "result"}});
}

}  // namespace

void register_proc_ops(OpTable& ops) {
    ops.emplace("proc_attach", proc_attach);
    ops.emplace("proc_status", proc_status);
    ops.emplace("proc_list", proc_list);
    ops.emplace("proc_signal", proc_signal);
    ops.emplace("proc_stdin", proc_stdin);
    ops.emplace("proc_remove", proc_remove);
}

}  // namespace sbx::agent

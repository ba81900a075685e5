// The exec op (docs/agent-protocol.md, "exec"). An attached exec uses two
// threads: the session's own reads the client (stdin, signal, resize) and
// feeds the process's stdin without ever blocking on it (poll), and a pump
// thread forwards output as it is produced, blocking on the socket when the
// client reads slowly (back-pressure reaches the process through its pipe;
// nothing piles up in the agent). The pump ends when the output is done and
// the process reaped, and the session thread then sends the exit. The
// timeout is the reaper's (reaper.hpp), independent of either thread.
#include <poll.h>
#include <sys/eventfd.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <system_error>
#include <thread>

#include "guest-agent/agent/agent.hpp"
#include "guest-agent/exec/exec_ops.hpp"
#include "guest-agent/exec/output_pump.hpp"
#include "guest-agent/exec/process_table.hpp"

namespace sbx::agent {

Json exit_fields(const ExitStatus& status) {
    Json out = Json::object();
    if (status.signal) {
        out["signal"] = *status.signal;
    } else {
        out["code"] = status.code.value_or(0);
    }
    out["timed_out"] = status.timed_out;
    return out;
}

Result<void> reply_error(Session& session, const Error& error) {
    std::string_view error_code = error.errno_value == EAGAIN  ? code::kLimit
                                  : error.errno_value == EBUSY ? code::kBadRequest
                                  : error.errno_value != 0     ? code_for_errno(error.errno_value)
                                                               : code::kBadRequest;
    // Messages quote the request (a path, a name) and must fit a JSON
    // message even when the request was built to be as large as one.
    constexpr std::size_t kMaxMessage = 4096;
    std::string message = error.to_string();
    if (message.size() > kMaxMessage) {
        message.resize(kMaxMessage);
        message += "...";
    }
    return session.stream().write_message(error_message(error_code, message));
}

std::optional<int> valid_signal(const Json& message) {
    auto sig = get_int(message, "signal");
    if (!sig || *sig < 1 || *sig >= NSIG) {
        return std::nullopt;
    }
    return static_cast<int>(*sig);
}

namespace {

class AttachedExec {
public:
    AttachedExec(Session& session, SpawnedProcess process)
        : session_(session),
          stream_(session.stream()),
          process_(std::move(process)),
          done_(::eventfd(0, EFD_CLOEXEC)) {}

    Result<void> run() {
        if (!done_) {
            process_.child->signal_group(SIGKILL);
            return sys_error("eventfd");
        }
        std::thread pump_thread;
        try {
            pump_thread = std::thread([this] { pump(); });
        } catch (const std::system_error& e) {  // out of threads: no exception may leave a handler
            process_.child->signal_group(SIGKILL);
            return reply_error(session_,
                               errno_error(fmt::format("starting the output thread: {}", e.what()), EAGAIN));
        }
        auto served = serve_client();
        if (!served) {
            // Attached processes do not outlive their connection. The
            // session ends too: a client that broke framing but does not
            // read must not keep the pump blocked in a write.
            client_gone_ = true;
            process_.child->signal_group(SIGKILL);
            stream_.shutdown_write();
        }
        pump_thread.join();
        if (!served) {
            return served.error();
        }
        Json exit = exit_fields(process_.child->exit_status().value_or(ExitStatus{}));
        exit["type"] = "exit";
        return stream_.write_message(exit);
    }

private:
    void pump() {
        std::uint64_t offsets[3] = {};
        pump_output(process_, [this, &offsets](Channel channel, std::span<const std::uint8_t> bytes) {
            auto& offset = offsets[static_cast<int>(channel)];
            if (!client_gone_ && !stream_.write_data(channel, offset, bytes)) {
                client_gone_ = true;
                process_.child->signal_group(SIGKILL);
            }
            offset += bytes.size();
        });
        if (!client_gone_ && (!stream_.write_eof(Channel::Stdout) || !stream_.write_eof(Channel::Stderr))) {
            client_gone_ = true;
        }
        process_.child->wait();
        const std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(done_.get(), &one, sizeof one);
    }

    // Returns once the pump is done; an Error when the client went away or
    // broke framing.
    Result<void> serve_client() {
        while (true) {
            const bool feeding = pending_at_ < pending_.size();
            if (!feeding && stream_.has_buffered_input()) {
                if (auto r = read_from_client(); !r) {
                    return r;
                }
                continue;
            }
            pollfd fds[2] = {
                {done_.get(), POLLIN, 0},
                feeding ? pollfd{process_.in.get(), POLLOUT, 0} : pollfd{stream_.fd(), POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0) {
                if (errno == EINTR) {
                    continue;
                }
                return sys_error("poll");
            }
            if (fds[0].revents != 0) {
                return ok();
            }
            if (fds[1].revents == 0) {
                continue;
            }
            if (feeding) {
                feed_stdin();
            } else if (auto r = read_from_client(); !r) {
                return r;
            }
        }
    }

    Result<void> read_from_client() {
        auto frame = stream_.read();
        if (!frame) {
            return frame.error();
        }
        switch (frame->kind) {
            case FrameKind::Data:
                if (frame->channel == Channel::Stdin && process_.in && !close_after_pending_ &&
                    !frame->data.empty()) {
                    last_stdin_byte_ = frame->data.back();
                    pending_ = std::move(frame->data);
                    pending_at_ = 0;
                }
                break;
            case FrameKind::Eof:
                if (frame->channel == Channel::Stdin && process_.in && !close_after_pending_) {
                    end_stdin();
                }
                break;
            case FrameKind::Json:
                control(frame->json);
                break;
        }
        return ok();
    }

    // Stdin's EOF. A terminal has no EOF of its own: it gets its EOF
    // character, twice when a line is unfinished (the first only ends it).
    void end_stdin() {
        close_after_pending_ = true;
        if (process_.terminal) {
            termios t{};
            const std::uint8_t veof = ::tcgetattr(process_.terminal.get(), &t) == 0 ? t.c_cc[VEOF] : 4;
            // Nothing is pending here: frames are read only when it is so.
            pending_.assign(last_stdin_byte_ == '\n' ? 1 : 2, veof);
            pending_at_ = 0;
        }
        if (pending_at_ == pending_.size()) {
            process_.in.reset();
        }
    }

    void feed_stdin() {
        ssize_t n = ::write(process_.in.get(), pending_.data() + pending_at_, pending_.size() - pending_at_);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        }
        if (n < 0) {  // EPIPE: the process closed its stdin; what the client sends is dropped
            process_.in.reset();
            pending_.clear();
            pending_at_ = 0;
            return;
        }
        pending_at_ += static_cast<std::size_t>(n);
        if (pending_at_ == pending_.size()) {
            pending_.clear();
            pending_at_ = 0;
            if (close_after_pending_) {
                process_.in.reset();
            }
        }
    }

    // signal and resize; anything else in the middle of an exec is ignored
    // (no reply can be sent before the exit without being taken for it).
    void control(std::string_view text) {
        auto message = parse_message(text);
        if (!message) {
            return;
        }
        const auto& type = (*message)["type"];
        if (type == "signal") {
            if (auto sig = valid_signal(*message)) {
                process_.child->signal_group(*sig);
            }
        } else if (type == "resize" && process_.terminal) {
            auto rows = get_int(*message, "rows");
            auto cols = get_int(*message, "cols");
            if (rows && cols && *rows >= 0 && *rows <= 0xffff && *cols >= 0 && *cols <= 0xffff) {
                [[maybe_unused]] auto r = resize_terminal(
                    process_.terminal.get(),
                    WindowSize{static_cast<std::uint16_t>(*rows), static_cast<std::uint16_t>(*cols)});
            }
        }
    }

    Session& session_;
    FrameStream& stream_;
    SpawnedProcess process_;
    UniqueFd done_;  // eventfd: the pump has finished
    std::atomic<bool> client_gone_{false};
    std::vector<std::uint8_t> pending_;  // one stdin frame being written to the process
    std::size_t pending_at_ = 0;
    bool close_after_pending_ = false;
    std::uint8_t last_stdin_byte_ = '\n';
};

Result<void> exec(Session& session, const Json& request) {
    const AgentOptions& options = session.agent().options();
    auto spec = parse_exec_request(request, options.env_file, {}, options.default_user);
    if (!spec) {
        return reply_error(session, spec.error());
    }
    spec->plan.oom_score_adj = session.agent().options().child_oom_score_adj;
    if (spec->detach) {
        auto process = session.agent().processes().start(*spec);
        if (!process) {
            return reply_error(session, process.error());
        }
        return session.stream().write_message(
            Json{{"type", "result"}, {"id", (*process)->id()}, {"pid", (*process)->pid()}});
    }
    auto process = spawn(spec->plan);
    if (!process) {
        return reply_error(session, process.error());
    }
    const pid_t pid = process->child->pid();
    if (auto r = session.stream().write_message(Json{{"type", "started"}, {"pid", pid}}); !r) {
        process->child->signal_group(SIGKILL);
        // The pump still has to run for the process to be collected cleanly.
    }
    return AttachedExec(session, std::move(*process)).run();
}

}  // namespace

void register_exec_ops(OpTable& ops) {
    ops.emplace("exec", exec);
    register_proc_ops(ops);
}

}  // namespace sbx::agent

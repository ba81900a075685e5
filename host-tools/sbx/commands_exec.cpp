// exec: run a command and stream its output (NDJSON), start it detached,
// show a process's status, or attach to its output from a byte offset
// (SSE). Routes: /work/helpers/exec-api.md, docs/api.md.
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "host-tools/sbx/commands.hpp"
#include "host-tools/sbx/stream_decoders.hpp"

namespace sbx::cli {

namespace {

// exec's stdin travels base64 in the request body, which sbxd caps at
// 1 MiB; larger input belongs in a file (sbx scp).
constexpr std::size_t kMaxStdinBytes = 700 * 1024;

// Writes all of `bytes` to our stdout/stderr; a reader that went away
// (`sbx exec ... | head`) ends sbx the way it would end cat.
void write_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        ssize_t n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            std::_Exit(128 + SIGPIPE);
        }
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
}

Result<std::optional<std::string>> read_stdin(bool skip) {
    if (skip || ::isatty(STDIN_FILENO) == 1) {
        return std::optional<std::string>();
    }
    std::string all;
    std::array<char, 65536> chunk;
    for (;;) {
        ssize_t n = ::read(STDIN_FILENO, chunk.data(), chunk.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            // No stdin at all (closed fd 0) is no input.
            if (errno == EBADF) {
                return std::optional<std::string>();
            }
            return sys_error("reading stdin").with_code("local");
        }
        if (n == 0) {
            break;
        }
        all.append(chunk.data(), static_cast<std::size_t>(n));
        if (all.size() > kMaxStdinBytes) {
            return make_coded_error(
                "local", "stdin is over {} KiB; copy larger input in with sbx scp, or pass --no-stdin",
                kMaxStdinBytes / 1024);
        }
    }
    return all.empty() ? std::optional<std::string>() : std::optional<std::string>(std::move(all));
}

}  // namespace

int exit_status_of(const Json& exit) {
    if (exit.value("timedOut", false)) {
        return kExitTimedOut;
    }
    if (exit.contains("exitCode") && exit["exitCode"].is_number_integer()) {
        return exit["exitCode"].get<int>() & 0xff;
    }
    if (exit.contains("signal") && exit["signal"].is_number_integer()) {
        return 128 + exit["signal"].get<int>();
    }
    return kExitOwnFailure;
}

int own_failure(const Context& ctx, Failure failure) {
    failure.exit_code = kExitOwnFailure;
    return ctx.out.fail(explained(ctx, std::move(failure)));
}

namespace {

// The stream's head: 200 goes on, anything else is read as the API's error.
std::optional<Failure> expect_200(HttpStream& stream) {
    if (stream.status() == 200) {
        return std::nullopt;
    }
    auto reply = stream.to_reply(1 << 20);
    return reply ? failure_of(*reply) : failure_of(reply.error());
}

int run_attached(const Context& ctx, const ExecCommand& command, const Json& body) {
    auto stream = ctx.client.open(post(target({"v1", "sandboxes", command.id, "exec"}), body));
    if (!stream) {
        return own_failure(ctx, failure_of(stream.error()));
    }
    if (auto failure = expect_200(*stream)) {
        return own_failure(ctx, *failure);
    }
    LineSplitter lines;
    std::array<char, 65536> chunk;
    for (;;) {
        auto got = stream->read(chunk);
        if (!got) {
            return own_failure(ctx, failure_of(got.error()));
        }
        if (*got == 0) {
            return own_failure(
                ctx, failure_of(make_coded_error("connection_lost",
                                                 "the exec stream ended before the command's exit")));
        }
        for (const auto& line : lines.feed({chunk.data(), *got})) {
            Json event = Json::parse(line, nullptr, false);
            std::string type = event.is_object() ? event.value("type", "") : "";
            if (command.raw_events) {
                write_all(STDOUT_FILENO, line + "\n");
            }
            if (type == "stdout" || type == "stderr") {
                if (command.raw_events) {
                    continue;
                }
                auto bytes = base64_decode(event.value("data", ""));
                if (!bytes) {
                    return own_failure(ctx, failure_of(bytes.error()));
                }
                write_all(type == "stdout" ? STDOUT_FILENO : STDERR_FILENO, *bytes);
            } else if (type == "exit") {
                return exit_status_of(event);
            } else if (type == "error") {
                Failure failure;
                failure.code = event.value("code", "internal");
                failure.message = event.value("message", "the exec failed");
                failure.status = 200;
                failure.request_id = stream->header("X-Request-Id");
                return own_failure(ctx, failure);
            } else if (type.empty()) {
                return own_failure(
                    ctx, failure_of(make_coded_error("bad_response", "an exec event that is not JSON: {}",
                                                     line.substr(0, 200))));
            }
        }
    }
}

int run_detached(const Context& ctx, const ExecCommand& command, const Json& body) {
    Outcome reply = call(ctx, post(target({"v1", "sandboxes", command.id, "exec"}), body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json process = reply.body().value("process", Json::object());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "process"}, {"id", command.id}, {"process", process}});
    } else {
        ctx.out.text(fmt::format("{}  pid {}\n", cell(process, "id"), cell(process, "pid")));
    }
    return kExitOk;
}

int run_status(const Context& ctx, const ExecCommand& command) {
    Outcome reply =
        call(ctx, get(target({"v1", "sandboxes", command.id, "processes", command.status_process})));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json process = reply.body().value("process", Json::object());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "process"}, {"id", command.id}, {"process", process}});
        return kExitOk;
    }
    std::string state = "running";
    if (!process.value("running", false)) {
        state = process.value("signal", Json()).is_number() ? "killed by signal " + cell(process, "signal")
                                                            : "exited " + cell(process, "exitCode");
    }
    ctx.out.text(fmt::format("{}  pid {}  {}  {} output bytes  {}\n", cell(process, "id"),
                             cell(process, "pid"), state, cell(process, "outputBytes"),
                             shell_words(process.value("command", Json()))));
    auto tail = base64_decode(process.value("tail", ""));
    if (tail && !tail->empty()) {
        ctx.out.note("--- the end of its output ---");
        write_all(STDOUT_FILENO, *tail);
    }
    return kExitOk;
}

// SIGINT/SIGTERM during --attach: say where the output was left, so a
// reattach loses and repeats nothing (SSE ids are byte offsets). A signal
// handler reaches only file-scope state: the offset, stored after each
// write, and the text around it, fixed before the handler goes in.
struct InterruptNote {
    std::atomic<std::uint64_t> offset{0};
    char before[512] = {};  // ... N
    char after[512] = {};   // then this, then N again when `twice`, then `end`
    char end[8] = {};
    bool twice = false;
};
InterruptNote g_interrupt_note;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables): the handler's

void write_offset(std::uint64_t value) {
    char digits[24];
    std::size_t n = sizeof digits;
    do {
        digits[--n] = static_cast<char>('0' + value % 10);
        value /= 10;
    } while (value != 0);
    (void)!::write(STDERR_FILENO, digits + n, sizeof digits - n);
}

extern "C" void on_attach_interrupt(int signal) {
    const InterruptNote& note = g_interrupt_note;
    std::uint64_t offset = note.offset.load();
    (void)!::write(STDERR_FILENO, note.before, std::strlen(note.before));
    write_offset(offset);
    (void)!::write(STDERR_FILENO, note.after, std::strlen(note.after));
    if (note.twice) {
        write_offset(offset);
    }
    (void)!::write(STDERR_FILENO, note.end, std::strlen(note.end));
    std::_Exit(128 + signal);
}

// Installs the handler for its lifetime.
class InterruptReport {
public:
    InterruptReport(const Context& ctx, const ExecCommand& command) {
        InterruptNote& note = g_interrupt_note;
        note.offset = command.offset;
        std::string before, after;
        if (ctx.out.json()) {
            before = "{\"type\":\"detached\",\"offset\":";
            after = fmt::format(",\"id\":{},\"process\":{}", Json(command.id).dump(),
                                Json(command.attach_process).dump());
            std::strcpy(note.end, "}\n");
            note.twice = false;
        } else {
            before = "\nsbx: stopped at offset ";
            after = fmt::format("; go on with: sbx exec {} --attach {} --offset ", command.id,
                                command.attach_process);
            std::strcpy(note.end, "\n");
            note.twice = true;
        }
        std::snprintf(note.before, sizeof note.before, "%s", before.c_str());
        std::snprintf(note.after, sizeof note.after, "%s", after.c_str());
        struct sigaction action {};
        action.sa_handler = on_attach_interrupt;
        ::sigemptyset(&action.sa_mask);
        ::sigaction(SIGINT, &action, &old_int_);
        ::sigaction(SIGTERM, &action, &old_term_);
    }
    ~InterruptReport() {
        ::sigaction(SIGINT, &old_int_, nullptr);
        ::sigaction(SIGTERM, &old_term_, nullptr);
    }
    InterruptReport(const InterruptReport&) = delete;
    InterruptReport& operator=(const InterruptReport&) = delete;

    // Between hold() and reached(), output is being written: a signal
    // waits until the offset says how far it got.
    void hold() { ::pthread_sigmask(SIG_BLOCK, &signals_, nullptr); }
    void reached(std::uint64_t offset) {
        g_interrupt_note.offset = offset;
        ::pthread_sigmask(SIG_UNBLOCK, &signals_, nullptr);
    }

private:
    sigset_t signals_ = [] {
        sigset_t set;
        ::sigemptyset(&set);
        ::sigaddset(&set, SIGINT);
        ::sigaddset(&set, SIGTERM);
        return set;
    }();
    struct sigaction old_int_ {};
    struct sigaction old_term_ {};
};

int run_attach(const Context& ctx, const ExecCommand& command) {
    std::string path = target({"v1", "sandboxes", command.id, "processes", command.attach_process, "output"},
                              {{"offset", std::to_string(command.offset)}});
    auto stream = ctx.client.open(get(path));
    if (!stream) {
        return own_failure(ctx, failure_of(stream.error()));
    }
    if (auto failure = expect_200(*stream)) {
        return own_failure(ctx, *failure);
    }
    SseParser sse;
    std::uint64_t offset = command.offset;
    InterruptReport interrupt(ctx, command);
    std::array<char, 65536> chunk;
    for (;;) {
        auto got = stream->read(chunk);
        if (!got || *got == 0) {
            // Whatever broke, the offset says where a reattach carries on.
            Failure failure =
                got ? failure_of(make_coded_error("connection_lost", "the output stream ended early"))
                    : failure_of(got.error());
            failure.message +=
                fmt::format("; reattach with --attach {} --offset {}", command.attach_process, offset);
            return own_failure(ctx, failure);
        }
        for (const auto& event : sse.feed({chunk.data(), *got})) {
            if (event.event == "output") {
                auto bytes = base64_decode(event.data);
                if (!bytes) {
                    return own_failure(ctx, failure_of(bytes.error()));
                }
                if (event.id) {
                    offset = std::strtoull(event.id->c_str(), nullptr, 10);
                }
                interrupt.hold();
                if (command.raw_events) {
                    ctx.out.event({{"type", "output"}, {"offset", offset}, {"data", event.data}});
                } else {
                    write_all(STDOUT_FILENO, *bytes);
                }
                interrupt.reached(offset);
            } else if (event.event == "exit") {
                Json exit = Json::parse(event.data, nullptr, false);
                if (command.raw_events) {
                    ctx.out.event({{"type", "exit"}, {"offset", offset}, {"exit", exit}});
                }
                return exit_status_of(exit.is_object() ? exit : Json::object());
            }
        }
    }
}

std::optional<std::string> lookup_env(const std::string& name) {
    const char* value = std::getenv(name.c_str());
    return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

// Stdin that is a pipe or a socket (of unknown length and maybe
// interactive) or a file over kMaxStdinBytes: streamed over the WebSocket
// rather than read whole first (a smaller file or /dev/null is read whole).
bool stdin_is_stream() {
    struct stat st {};
    if (::fstat(STDIN_FILENO, &st) != 0) {
        return false;
    }
    return S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ||
           (S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) > kMaxStdinBytes);
}

}  // namespace

int run_exec(const Context& ctx, ExecCommand command) {
    if (!command.status_process.empty()) {
        return run_status(ctx, command);
    }
    if (!command.attach_process.empty()) {
        return run_attach(ctx, command);
    }
    if (command.tty && command.exec.detach) {
        return ctx.out.fail(make_coded_error("usage", "exec: --tty needs an attached command, not --detach"));
    }
    if (command.tty || (!command.no_stdin && !command.exec.detach && stdin_is_stream())) {
        auto body = exec_body(command.exec, lookup_env);
        if (!body) {
            return ctx.out.fail(body.error());
        }
        return run_ws_exec(ctx, command, *body);
    }
    auto input = read_stdin(command.no_stdin || command.exec.detach);
    if (!input) {
        return ctx.out.fail(input.error());
    }
    command.exec.stdin_bytes = std::move(*input);
    auto body = exec_body(command.exec, lookup_env);
    if (!body) {
        return ctx.out.fail(body.error());
    }
    return command.exec.detach ? run_detached(ctx, command, *body) : run_attached(ctx, command, *body);
}

}  // namespace sbx::cli

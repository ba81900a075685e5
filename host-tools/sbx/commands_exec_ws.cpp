// exec over GET /v1/sandboxes/{id}/exec/ws (docs/api.md, "Exec over a
// WebSocket"): --tty runs the command on a pseudo-terminal with ours in
// raw mode (restored on every way out) and SIGWINCH sent as a resize;
// without --tty, stdin from a pipe is streamed as it comes, then EOF.
// SIGINT, SIGTERM, SIGHUP and SIGQUIT that reach sbx are sent on to the
// command; a second one makes sbx drop the connection and exit 128+N. One thread runs the connection; another
// waits on stdin and on the signals, and sends at most a few chunks ahead of the socket.
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>

#include "host-tools/sbx/commands.hpp"
#include "host-tools/sbx/ws_client.hpp"

namespace sbx::cli {

namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH};
constexpr std::size_t kStdinChunk = 64 * 1024;
constexpr int kChunksAhead = 4;

// The signal handler's only state: where it writes the signal's number.
std::atomic<int> g_signal_pipe{
    -1};  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables): the handler's

extern "C" void on_forwarded_signal(int signal) {
    const int saved = errno;
    auto byte = static_cast<unsigned char>(signal);
    (void)!::write(g_signal_pipe.load(), &byte, 1);
    errno = saved;
}

// The forwarded signals go to a pipe while this lives.
class SignalPipe {
public:
    SignalPipe() {
        if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
            fds_[0] = fds_[1] = -1;
            return;
        }
        g_signal_pipe = fds_[1];
        for (std::size_t i = 0; i < std::size(kForwarded); ++i) {
            struct sigaction action {};
            action.sa_handler = on_forwarded_signal;
            action.sa_flags = SA_RESTART;
            ::sigemptyset(&action.sa_mask);
            ::sigaction(kForwarded[i], &action, &old_[i]);
        }
    }
    ~SignalPipe() {
        if (fds_[0] < 0) {
            return;
        }
        for (std::size_t i = 0; i < std::size(kForwarded); ++i) {
            ::sigaction(kForwarded[i], &old_[i], nullptr);
        }
        g_signal_pipe = -1;
        ::close(fds_[0]);
        ::close(fds_[1]);
    }
    SignalPipe(const SignalPipe&) = delete;
    SignalPipe& operator=(const SignalPipe&) = delete;
    [[nodiscard]] int fd() const { return fds_[0]; }

private:
    int fds_[2] = {-1, -1};
    struct sigaction old_[std::size(kForwarded)]{};
};

// Our terminal in raw mode (no echo, no line editing, no signals from
// keys: ^C goes to the command's pty) while this lives.
class RawTerminal {
public:
    explicit RawTerminal(int fd) : fd_(fd) {
        if (::tcgetattr(fd, &saved_) != 0) {
            return;
        }
        termios raw = saved_;
        ::cfmakeraw(&raw);
        active_ = ::tcsetattr(fd, TCSAFLUSH, &raw) == 0;
    }
    ~RawTerminal() {
        if (active_) {
            ::tcsetattr(fd_, TCSAFLUSH, &saved_);
        }
    }
    RawTerminal(const RawTerminal&) = delete;
    RawTerminal& operator=(const RawTerminal&) = delete;

private:
    int fd_;
    termios saved_{};
    bool active_ = false;
};

std::optional<TtySize> terminal_size() {
    for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
        winsize size{};
        if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_row > 0 && size.ws_col > 0) {
            return TtySize{size.ws_row, size.ws_col};
        }
    }
    return std::nullopt;
}

// All of `bytes` to fd; false when the reader went away.
bool write_out(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        ssize_t n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

// The thread that turns stdin and signals into messages.
class InputPump {
public:
    InputPump(WsExecClient& client, bool send_stdin, bool tty, int signal_fd)
        : client_(client), send_stdin_(send_stdin), tty_(tty), signal_fd_(signal_fd) {
        if (::pipe2(stop_, O_CLOEXEC) != 0) {
            stop_[0] = stop_[1] = -1;
        }
        thread_ = std::thread([this] { loop(); });
    }
    ~InputPump() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        changed_.notify_all();
        if (stop_[1] >= 0) {
            (void)!::write(stop_[1], "x", 1);
        }
        thread_.join();
        for (int fd : stop_) {
            if (fd >= 0) {
                ::close(fd);
            }
        }
    }
    InputPump(const InputPump&) = delete;
    InputPump& operator=(const InputPump&) = delete;
    // The signal sbx gave up at (a second one), or 0.
    [[nodiscard]] int abandoned() const { return abandoned_; }

private:
    void send(bool text, std::string data, bool counted) {
        if (counted) {
            std::unique_lock lock(mutex_);
            changed_.wait(lock, [&] { return stopping_ || in_flight_ < kChunksAhead; });
            if (stopping_) {
                return;
            }
            ++in_flight_;
        }
        client_.post([this, text, data = std::move(data), counted]() mutable {
            client_.send(text, std::move(data), [this, counted] {
                if (counted) {
                    {
                        std::lock_guard lock(mutex_);
                        --in_flight_;
                    }
                    changed_.notify_all();
                }
            });
        });
    }

    void loop() {
        bool reading = send_stdin_;
        std::array<char, kStdinChunk> chunk;
        for (;;) {
            std::array<pollfd, 3> fds{
                {{stop_[0], POLLIN, 0}, {signal_fd_, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}}};
            int n = ::poll(fds.data(), reading ? 3 : 2, -1);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0 || (fds[0].revents != 0)) {
                return;
            }
            if (fds[1].revents & POLLIN) {
                unsigned char signals[16];
                ssize_t got = ::read(signal_fd_, signals, sizeof signals);
                for (ssize_t i = 0; i < got; ++i) {
                    if (signals[i] != SIGWINCH && forwarded_++ > 0) {
                        abandoned_ = signals[i];
                        client_.post([this] { client_.abort(); });
                        return;
                    }
                    if (signals[i] != SIGWINCH) {
                        send(true, ws_signal_message(signals[i]), false);
                    } else if (auto size = terminal_size(); size && tty_) {
                        send(true, ws_resize_message(*size), false);
                    }
                }
            }
            if (reading && fds[2].revents != 0) {
                ssize_t got = ::read(STDIN_FILENO, chunk.data(), chunk.size());
                if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
                    continue;
                }
                if (got <= 0) {
                    reading = false;
                    send(true, ws_eof_message(), false);
                    continue;
                }
                send(false, std::string(chunk.data(), static_cast<std::size_t>(got)), true);
            }
        }
    }

    WsExecClient& client_;
    bool send_stdin_;
    bool tty_;
    int signal_fd_;
    int stop_[2] = {-1, -1};
    std::mutex mutex_;
    std::condition_variable changed_;
    int in_flight_ = 0;
    bool stopping_ = false;
    int forwarded_ = 0;
    std::atomic<int> abandoned_{0};
    std::thread thread_;
};

}  // namespace

int run_ws_exec(const Context& ctx, const ExecCommand& command, const Json& body) {
    std::optional<TtySize> tty;
    if (command.tty) {
        tty = terminal_size().value_or(TtySize{});
    }
    auto opened = WsExecClient::open(ctx.client.address(), ctx.client.api_key(),
                                     target({"v1", "sandboxes", command.id, "exec", "ws"}));
    if (!opened) {
        return own_failure(ctx, failure_of(opened.error()));
    }
    if (opened->declined) {
        return own_failure(ctx, failure_of(*opened->declined));
    }
    WsExecClient& client = *opened->client;
    std::optional<int> status;
    std::optional<Failure> failure;
    std::uint16_t close_code = 0;
    std::string close_reason;
    {
        SignalPipe signals;
        std::optional<RawTerminal> raw;
        if (command.tty && ::isatty(STDIN_FILENO) == 1) {
            raw.emplace(STDIN_FILENO);
        }
        client.send(true, ws_start_message(body, tty).dump());
        const bool send_stdin = !command.no_stdin;
        std::optional<InputPump> input;
        client.run(WsExecClient::Handlers{
            .message =
                [&](bool text, std::string_view data) {
                    if (!text) {
                        auto output = decode_ws_output(data);
                        if (!output) {
                            failure = failure_of(output.error());
                            return client.close();
                        }
                        if (command.raw_events) {
                            ctx.out.event({{"type", output->stream == 2 ? "stderr" : "stdout"},
                                           {"data", base64_encode(output->bytes)}});
                        } else if (!write_out(output->stream == 2 ? STDERR_FILENO : STDOUT_FILENO,
                                              output->bytes)) {
                            status = 128 + SIGPIPE;
                            return client.close();
                        }
                        return;
                    }
                    Json event = Json::parse(data, nullptr, false);
                    std::string type = event.is_object() ? event.value("type", "") : "";
                    if (command.raw_events && !type.empty()) {
                        ctx.out.event(event);
                    }
                    if (type == "start" && !input) {
                        input.emplace(client, send_stdin, command.tty, signals.fd());
                    } else if (type == "exit") {
                        status = exit_status_of(event);
                    } else if (type == "error") {
                        Failure f;
                        f.status = event.value("status", 0u);
                        f.code = event.value("code", "internal");
                        f.message = event.value("message", "the exec failed");
                        f.request_id = event.value("requestId", "");
                        failure = f;
                    }
                },
            .closed =
                [&](std::uint16_t code, std::string reason) {
                    close_code = code;
                    close_reason = std::move(reason);
                },
        });
        if (input && input->abandoned() != 0) {
            status = 128 + input->abandoned();
        }
        input.reset();
    }
    if (status) {
        return *status;
    }
    if (failure) {
        return own_failure(ctx, *failure);
    }
    return own_failure(
        ctx, failure_of(make_coded_error("connection_lost",
                                         "the exec WebSocket closed before the command's exit ({}{}{})",
                                         close_code == 0 ? "no close frame" : std::to_string(close_code),
                                         close_reason.empty() ? "" : ": ", close_reason)));
}

}  // namespace sbx::cli

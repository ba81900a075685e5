#include "host-tools/sbx/tcp_bridge.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/unique_fd.hpp"
#include "host-tools/sbx/api_requests.hpp"

namespace sbx::cli {

namespace {

Result<std::uint16_t> parse_port(std::string_view text, bool allow_zero) {
    unsigned value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value > 65535 ||
        (value == 0 && !allow_zero)) {
        return make_coded_error("usage", "'{}' is not a port ({}..65535)", text, allow_zero ? 0 : 1);
    }
    return static_cast<std::uint16_t>(value);
}

// One chunk in flight at a time: the reader waits until the WebSocket has
// written the last one, so a slow sbxd slows the local sender.
struct Flow {
    std::mutex mutex;
    std::condition_variable changed;
    bool busy = false;
    bool over = false;
    void sent() {
        std::lock_guard lock(mutex);
        busy = false;
        changed.notify_all();
    }
    void end() {
        std::lock_guard lock(mutex);
        over = true;
        changed.notify_all();
    }
    // false once the relay is over.
    bool wait_idle() {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return !busy || over; });
        busy = !over;
        return !over;
    }
};

// Local bytes to the WebSocket until the local end of stream (then eof),
// a local error (then the connection is dropped), or the end.
void read_local(WsExecClient& ws, Flow& flow, LocalStream local, int stop_fd, int abort_fd) {
    std::string buffer(kBridgeChunkBytes, '\0');
    while (true) {
        pollfd fds[3] = {{local.in_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}, {abort_fd, POLLIN, 0}};
        if (::poll(fds, 3, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        if (fds[1].revents != 0) {
            return;
        }
        if (fds[2].revents != 0) {
            ws.post([&ws] { ws.abort(); });
            return;
        }
        ssize_t n = ::read(local.in_fd, buffer.data(), buffer.size());
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (!flow.wait_idle()) {
            return;
        }
        if (n <= 0) {
            if (n == 0) {
                ws.post([&ws, &flow] { ws.send(true, ws_eof_message(), [&flow] { flow.sent(); }); });
            } else {
                ws.post([&ws] { ws.abort(); });
            }
            return;
        }
        ws.post([&ws, &flow, data = buffer.substr(0, static_cast<std::size_t>(n))]() mutable {
            ws.send(false, std::move(data), [&flow] { flow.sent(); });
        });
    }
}

}  // namespace

std::string tcp_ws_target(std::string_view id, std::uint16_t port) {
    return target({"v1", "sandboxes", id, "tcp", "ws"}, {{"port", std::to_string(port)}});
}
std::string tcp_listen_target(std::string_view id, std::uint16_t port) {
    return target({"v1", "sandboxes", id, "tcp", "listen", "ws"}, {{"port", std::to_string(port)}});
}
std::string tcp_accept_target(std::string_view id, std::string_view connection) {
    return target({"v1", "sandboxes", id, "tcp", "accept", "ws"}, {{"connection", std::string(connection)}});
}

Result<PortPair> parse_port_pair(std::string_view spec, bool allow_zero_first) {
    auto colon = spec.find(':');
    if (colon == std::string_view::npos) {
        auto port = parse_port(spec, false);
        if (!port) {
            return port.error();
        }
        return PortPair{*port, *port};
    }
    auto first = parse_port(spec.substr(0, colon), allow_zero_first);
    if (!first) {
        return first.error();
    }
    auto second = parse_port(spec.substr(colon + 1), false);
    if (!second) {
        return second.error();
    }
    return PortPair{*first, *second};
}

std::string BridgeEnd::describe() const {
    if (!error.empty()) {
        return error;
    }
    if (code == 0) {
        return "the connection to sbxd broke" + (reason.empty() ? std::string() : ": " + reason);
    }
    return fmt::format("sbxd closed it ({}{}{})", code, reason.empty() ? "" : " ", reason);
}

BridgeEnd carry(WsExecClient& ws, LocalStream local, int abort_fd) {
    BridgeEnd end;
    Flow flow;
    int stop_pipe[2];
    if (::pipe2(stop_pipe, O_CLOEXEC) != 0) {
        end.reason = "pipe2 failed";
        ws.abort();
        return end;
    }
    UniqueFd stop_read(stop_pipe[0]), stop_write(stop_pipe[1]);
    std::thread reader([&] { read_local(ws, flow, local, stop_read.get(), abort_fd); });
    bool local_out_open = true;
    WsExecClient::Handlers handlers;
    handlers.message = [&](bool text, std::string_view data) {
        if (!text) {
            if (local_out_open && !write_all(local.out_fd, data.data(), data.size())) {
                ws.abort();  // the local side went away: so does the connection
            }
            return;
        }
        Json message = Json::parse(data, nullptr, false);
        const std::string type = message.is_object() ? message.value("type", "") : "";
        if (type == "eof" && local_out_open) {
            local_out_open = false;
            if (local.socket) {
                ::shutdown(local.out_fd, SHUT_WR);
            } else {
                ::close(local.out_fd);
            }
        } else if (type == "error") {
            end.error = fmt::format("{}: {}", message.value("code", "error"), message.value("message", ""));
        }
    };
    handlers.closed = [&](std::uint16_t code, std::string reason) {
        end.code = code;
        end.reason = std::move(reason);
    };
    ws.run(std::move(handlers));
    flow.end();
    [[maybe_unused]] auto w = ::write(stop_write.get(), "x", 1);
    reader.join();
    return end;
}

}  // namespace sbx::cli

#include "host-tools/sbxd/vmm/control_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "base/unix_socket.hpp"

namespace sbx::sbxd {

namespace {

using Clock = std::chrono::steady_clock;

// A reply line is small (status, snapshot figures; diagnose is the
// largest); more than this is not a VMM talking.
constexpr std::size_t kMaxReplyBytes = 1 << 20;

int millis_left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 60'000));
}

// Waits for `events` on fd until the deadline; false on timeout.
Result<bool> wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        pollfd p{fd, events, 0};
        int n = ::poll(&p, 1, millis_left(deadline));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return sys_error("poll on the control socket");
        }
        if (n > 0) {
            return true;
        }
        if (Clock::now() >= deadline) {
            return false;
        }
    }
}

}  // namespace

Result<nlohmann::json> control_call(const std::string& socket_path, const nlohmann::json& request,
                                    std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    const std::string what = fmt::format("VMM control {} ({})", request.value("op", "?"), socket_path);
    auto fd = connect_unix(socket_path, Blocking::No);
    if (!fd) {
        return fd.error().context(what).with_code("vmm_unreachable");
    }
    std::string line = request.dump() + "\n";
    std::size_t sent = 0;
    while (sent < line.size()) {
        auto ready = wait_for(fd->get(), POLLOUT, deadline);
        if (!ready) {
            return ready.error().context(what);
        }
        if (!*ready) {
            return make_coded_error("timeout", "{}: the request was not taken within {} ms", what,
                                    timeout.count());
        }
        ssize_t n = ::send(fd->get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n < 0) {
            return sys_error("{}: sending", what).with_code("vmm_unreachable");
        }
        sent += static_cast<std::size_t>(n);
    }
    std::string reply;
    char buffer[4096];
    for (;;) {
        auto newline = reply.find('\n');
        if (newline != std::string::npos) {
            reply.resize(newline);
            break;
        }
        if (reply.size() > kMaxReplyBytes) {
            return make_coded_error("bad_reply", "{}: a reply line over {} bytes", what, kMaxReplyBytes);
        }
        auto ready = wait_for(fd->get(), POLLIN, deadline);
        if (!ready) {
            return ready.error().context(what);
        }
        if (!*ready) {
            return make_coded_error("timeout", "{}: no reply within {} ms", what, timeout.count());
        }
        ssize_t n = ::recv(fd->get(), buffer, sizeof buffer, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n < 0) {
            return sys_error("{}: reading", what).with_code("vmm_unreachable");
        }
        if (n == 0) {
            return make_coded_error("vmm_unreachable", "{}: the VMM closed the socket without a reply", what);
        }
        reply.append(buffer, static_cast<std::size_t>(n));
    }
    auto json = nlohmann::json::parse(reply, nullptr, false);
    if (json.is_discarded() || !json.is_object()) {
        return make_coded_error("bad_reply", "{}: the reply is not a JSON object", what);
    }
    auto ok = json.find("ok");
    if (ok != json.end() && ok->is_boolean() && ok->get<bool>()) {
        return json;
    }
    auto code = json.find("error");
    auto message = json.find("message");
    return make_coded_error(code != json.end() && code->is_string() ? code->get<std::string>() : "failed",
                            "{}: {}", what,
                            message != json.end() && message->is_string() ? message->get<std::string>()
                                                                          : reply.substr(0, 200));
}

}  // namespace sbx::sbxd

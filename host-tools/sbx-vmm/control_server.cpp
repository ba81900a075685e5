#include "host-tools/sbx-vmm/control_server.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <exception>

#include "base/log.hpp"
#include "base/unix_socket.hpp"

namespace sbx {

namespace {

constexpr std::size_t kMaxRequest = 64 * 1024;

// Only the socket's own user and root may drive the VMM (the socket file is
// 0600 too; this holds when the file is opened up, or passed on as an fd).
Result<void> check_peer(int fd) {
    ucred peer{};
    socklen_t length = sizeof peer;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {  // unix(7)
        return sys_error("SO_PEERCRED");
    }
    if (peer.uid != 0 && peer.uid != ::geteuid()) {
        return make_coded_error("permission_denied", "uid {} may not use this control socket", peer.uid);
    }
    return ok();
}

// A reply as one line. Strings from a request may be invalid UTF-8 once
// cut or echoed; they are replaced (U+FFFD), never thrown over.
std::string reply_line(const nlohmann::json& reply) {
    return reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

bool write_all(int fd, std::string_view text) {
    while (!text.empty()) {
        ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        text.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::start(const std::string& path, Handler handler,
                                                            const ThreadStartHook& hook) {
    auto listener = listen_unix(path);
    if (!listener) {
        return listener.error().context("control socket");
    }
    auto stop = EventFd::create();
    if (!stop) {
        return stop.error();
    }
    std::unique_ptr<ControlServer> server(
        new ControlServer(path, std::move(*listener), std::move(*stop), std::move(handler)));
    server->thread_ = std::thread([s = server.get(), hook] {
        start_thread_as(ThreadClass::Control, 0, hook);
        s->serve();
    });
    return server;
}

ControlServer::ControlServer(std::string path, UniqueFd listener, EventFd stop, Handler handler)
    : path_(std::move(path)), listener_(std::move(listener)), stop_(std::move(stop)), handler_(std::move(handler)) {}

ControlServer::~ControlServer() {
    [[maybe_unused]] auto r = stop_.signal();
    if (thread_.joinable()) {
        thread_.join();
    }
    ::unlink(path_.c_str());
}

nlohmann::json ControlServer::error_reply(const Error& error) {
    return {{"ok", false}, {"error", error.code.empty() ? std::string("failed") : error.code},
            {"message", error.to_string()}};
}

void ControlServer::serve() {
    while (true) {
        std::array<pollfd, 2> fds{pollfd{listener_.get(), POLLIN, 0}, pollfd{stop_.fd(), POLLIN, 0}};
        if (::poll(fds.data(), fds.size(), -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            log::error("control socket: poll: {}", std::strerror(errno));
            return;
        }
        if (fds[1].revents != 0) {
            return;
        }
        UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (client.get() < 0) {
            continue;
        }
        if (auto allowed = check_peer(client.get()); !allowed) {
            log::warn("control socket: {}", allowed.error().to_string());
            write_all(client.get(), reply_line(error_reply(allowed.error())));
            continue;
        }
        try {
            serve_client(client.get());
        } catch (const std::exception& e) {  // std::bad_alloc: the client's connection ends, not the VMM
            log::error("control socket: {}", e.what());
        }
    }
}

// The handler's reply; whatever it throws becomes an error reply.
nlohmann::json ControlServer::handle(const nlohmann::json& request) {
    try {
        return handler_(request);
    } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
        return error_reply(make_coded_error("bad_request", "{}", e.what()));
    } catch (const std::exception& e) {
        log::error("control request: {}", e.what());
        return error_reply(make_coded_error("internal", "{}", e.what()));
    }
}

// Lines in, lines out, until the client closes, sends an over-long line or
// the server stops.
void ControlServer::serve_client(int fd) {
    std::string buffer;
    std::array<char, 4096> chunk{};
    while (true) {
        std::array<pollfd, 2> fds{pollfd{fd, POLLIN, 0}, pollfd{stop_.fd(), POLLIN, 0}};
        if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
            return;
        }
        if (fds[1].revents != 0) {
            return;
        }
        if (fds[0].revents == 0) {
            continue;
        }
        ssize_t n = ::read(fd, chunk.data(), chunk.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return;
        }
        buffer.append(chunk.data(), static_cast<std::size_t>(n));
        std::size_t newline;
        while ((newline = buffer.find('\n')) != std::string::npos) {
            std::string line = buffer.substr(0, newline);
            buffer.erase(0, newline + 1);
            nlohmann::json reply;
            auto request = nlohmann::json::parse(line, nullptr, false);
            if (request.is_discarded() || !request.is_object()) {
                reply = error_reply(make_coded_error("bad_request", "a request is one JSON object on one line"));
            } else {
                reply = handle(request);
            }
            if (!write_all(fd, reply_line(reply))) {
                return;
            }
        }
        if (buffer.size() > kMaxRequest) {
            write_all(fd, reply_line(error_reply(make_coded_error("bad_request", "request longer than 64 KiB"))));
            return;
        }
    }
}

}  // namespace sbx

#include "vmm/console.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace sbx {

namespace {

Result<UniqueFd> connect_unix(const std::string& path) {
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) {
        return make_error("console socket path is too long: {}", path);
    }
    int raw = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (raw < 0) {
        return sys_error("socket");
    }
    UniqueFd fd(raw);
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
        return sys_error("cannot connect the console to {}", path);
    }
    return fd;
}

// A private, non-blocking description of stdout: reopening /proc/self/fd/1
// gives pipes and ttys a description of our own, so O_NONBLOCK does not
// leak to the shell that shares the original. Sockets cannot be reopened;
// they get a dup and send(MSG_DONTWAIT).
Result<UniqueFd> open_stdout(bool& is_socket) {
    struct stat st {};
    if (::fstat(STDOUT_FILENO, &st) != 0) {
        return sys_error("stdout");
    }
    is_socket = S_ISSOCK(st.st_mode);
    if (!is_socket) {
        int fd = ::open("/proc/self/fd/1", O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            return UniqueFd(fd);
        }
    }
    int fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) {
        return sys_error("cannot duplicate stdout");
    }
    return UniqueFd(fd);
}

}  // namespace

Result<Console> Console::open(const ConsoleConfig& config) {
    Console c;
    switch (config.kind) {
        case ConsoleConfig::Kind::None: return c;
        case ConsoleConfig::Kind::Stdout: {
            auto fd = open_stdout(c.socket_);
            if (!fd) {
                return fd.error();
            }
            c.out_ = std::move(*fd);
            c.in_fd_ = STDIN_FILENO;
            break;
        }
        case ConsoleConfig::Kind::File: {
            const int keep = config.append ? 0 : O_TRUNC;
            auto fd = UniqueFd::open(config.path, O_WRONLY | O_CREAT | O_APPEND | keep, 0644);
            if (!fd) {
                return fd.error().context("console");
            }
            c.out_ = std::move(*fd);
            break;
        }
        case ConsoleConfig::Kind::Socket: {
            auto fd = connect_unix(config.path);
            if (!fd) {
                return fd.error();
            }
            c.out_ = std::move(*fd);
            c.socket_ = true;
            c.in_fd_ = c.out_.get();
            break;
        }
    }
    struct stat st {};
    c.pollable_ = ::fstat(c.out_.get(), &st) == 0 && !S_ISREG(st.st_mode);
    return c;
}

std::size_t Console::write_some(std::string_view data) {
    std::size_t done = 0;
    while (out_ && !broken_ && done < data.size()) {
        ssize_t n = socket_ ? ::send(out_.get(), data.data() + done, data.size() - done,
                                     MSG_DONTWAIT | MSG_NOSIGNAL)
                            : ::write(out_.get(), data.data() + done, data.size() - done);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return done;
        } else {
            broken_ = true;  // the reader is gone: discard from now on
        }
    }
    return data.size();
}

}  // namespace sbx

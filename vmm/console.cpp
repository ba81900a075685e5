#include "vmm/console.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include <fmt/format.h>

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
            // Bounded, the file is read back to move its newest half.
            const int mode = config.max_bytes > 0 ? O_RDWR : O_WRONLY | O_APPEND;
            auto fd = UniqueFd::open(config.path, mode | O_CREAT | keep, 0644);
            if (!fd) {
                return fd.error().context("console");
            }
            c.out_ = std::move(*fd);
            if (config.max_bytes > 0) {
                struct stat st {};
                if (::fstat(c.out_.get(), &st) != 0) {
                    return sys_error("console {}", config.path);
                }
                c.limit_ = std::max(config.max_bytes, ConsoleConfig::kMinMaxBytes);
                c.size_ = static_cast<std::uint64_t>(st.st_size);
            }
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
    if (limit_ > 0) {
        return write_bounded(data);
    }
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

std::size_t Console::write_bounded(std::string_view data) {
    std::size_t done = 0;
    while (out_ && !broken_ && done < data.size()) {
        ssize_t n = ::pwrite(out_.get(), data.data() + done, data.size() - done, static_cast<off_t>(size_));
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            size_ += static_cast<std::uint64_t>(n);
            if (size_ > limit_ && !drop_oldest_half()) {
                broken_ = true;
            }
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            broken_ = true;  // a full disk, say: discard from now on
        }
    }
    return data.size();
}

// The newest limit_/2 bytes move to the front, after a line that says how
// much went before them, and the file is cut there: a reader sees it shrink
// (sbx logs --follow starts again), and the file stays under limit_.
bool Console::drop_oldest_half() {
    const std::uint64_t keep = limit_ / 2;
    const std::uint64_t from = size_ - keep;
    dropped_ += from - note_bytes_;  // the earlier note was not output
    const std::string note =
        fmt::format("[sbx-vmm: the console log is kept under {} bytes: {} older bytes were dropped]\n", limit_,
                    dropped_);
    if (::pwrite(out_.get(), note.data(), note.size(), 0) != static_cast<ssize_t>(note.size())) {
        return false;
    }
    // Forwards: the destination (after the note) is always before the source.
    std::array<char, 64 * 1024> chunk{};
    for (std::uint64_t moved = 0; moved < keep;) {
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), keep - moved));
        const ssize_t got = ::pread(out_.get(), chunk.data(), want, static_cast<off_t>(from + moved));
        if (got <= 0 || ::pwrite(out_.get(), chunk.data(), static_cast<std::size_t>(got),
                                 static_cast<off_t>(note.size() + moved)) != got) {
            return false;
        }
        moved += static_cast<std::uint64_t>(got);
    }
    note_bytes_ = note.size();
    size_ = note.size() + keep;
    return ::ftruncate(out_.get(), static_cast<off_t>(size_)) == 0;
}

}  // namespace sbx

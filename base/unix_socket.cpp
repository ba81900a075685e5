#include "base/unix_socket.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iterator>

namespace sbx {
namespace {

Result<sockaddr_un> unix_address(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
        return make_error("socket path '{}' must be 1 to {} bytes", path, sizeof(addr.sun_path) - 1);
    }
    std::copy(path.begin(), path.end(), std::begin(addr.sun_path));
    return addr;
}

Result<UniqueFd> stream_socket(Blocking blocking) {
    const int flags = SOCK_STREAM | SOCK_CLOEXEC | (blocking == Blocking::No ? SOCK_NONBLOCK : 0);
    UniqueFd fd(::socket(AF_UNIX, flags, 0));
    if (!fd) {
        return sys_error("creating a Unix socket");
    }
    return fd;
}

// A socket file left behind by a process that is gone refuses
// connections; a live listener accepts them (or has a full backlog).
Result<void> remove_stale_socket(const std::string& path, const sockaddr_un& addr) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) {
            return ok();
        }
        return sys_error("socket path {}", path);
    }
    if (!S_ISSOCK(st.st_mode)) {
        return make_error("socket path {} exists and is not a socket", path);
    }
    auto probe = stream_socket(Blocking::No);
    if (!probe) {
        return probe.error();
    }
    if (::connect(probe->get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 || errno == EAGAIN) {
        return make_error("socket path {} is in use by a listening process", path);
    }
    if (errno != ECONNREFUSED) {
        return sys_error("socket path {}", path);
    }
    if (::unlink(path.c_str()) != 0) {
        return sys_error("removing stale socket {}", path);
    }
    return ok();
}

// A directory only this user may enter, beside the socket's path, removed
// (with the socket name in it) when it goes out of scope.
class PrivateDir {
public:
    static Result<PrivateDir> create_beside(const std::string& path) {
        auto slash = path.rfind('/');
        std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
        // ".XXXXXX/s" is no longer than "NAME" for any NAME of 9 bytes or
        // more, so the socket fits sun_path inside wherever its path does,
        // without /proc (which a jailed sbx-vmm has not).
        std::string templ = (parent == "/" ? "" : parent) + "/.XXXXXX";
        if (::mkdtemp(templ.data()) == nullptr) {  // mode 0700 (mkdtemp(3))
            return sys_error("creating a private directory beside socket {}", path);
        }
        PrivateDir dir(std::move(templ));
        dir.fd_ = UniqueFd(::open(dir.path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!dir.fd_) {
            return sys_error("opening {}", dir.path_);
        }
        return dir;
    }
    PrivateDir(PrivateDir&& other) noexcept : path_(std::move(other.path_)), fd_(std::move(other.fd_)) {
        other.path_.clear();
    }
    PrivateDir& operator=(PrivateDir&&) = delete;
    PrivateDir(const PrivateDir&) = delete;
    PrivateDir& operator=(const PrivateDir&) = delete;
    ~PrivateDir() {
        if (!path_.empty()) {
            ::unlinkat(fd_.get(), kName, 0);
            ::rmdir(path_.c_str());
        }
    }

    static constexpr const char* kName = "s";
    [[nodiscard]] int fd() const { return fd_.get(); }
    // The socket's name inside, as bind(2) takes it: through /proc/self/fd
    // when the plain path would not fit sun_path.
    [[nodiscard]] std::string socket_path() const {
        std::string plain = path_ + "/" + kName;
        if (plain.size() < sizeof(sockaddr_un::sun_path)) {
            return plain;
        }
        return "/proc/self/fd/" + std::to_string(fd_.get()) + "/" + kName;
    }

private:
    explicit PrivateDir(std::string path) : path_(std::move(path)) {}
    std::string path_;
    UniqueFd fd_;
};

// Gives the socket bound in `dir` the name `path`, never replacing a file
// that appeared there since the stale-socket check: link(2) fails with
// EEXIST; rename with RENAME_NOREPLACE (rename(2)) where the filesystem has
// no hard links.
Result<void> publish(const PrivateDir& dir, const std::string& path) {
    if (::linkat(dir.fd(), PrivateDir::kName, AT_FDCWD, path.c_str(), 0) == 0) {
        return ok();
    }
    if (errno == EEXIST) {
        return make_error("socket path {} appeared while binding", path);
    }
    if (::renameat2(dir.fd(), PrivateDir::kName, AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
        return ok();
    }
    return sys_error("naming socket {}", path);
}

}  // namespace

Result<UniqueFd> connect_unix(const std::string& path, Blocking blocking) {
    auto addr = unix_address(path);
    if (!addr) {
        return addr.error();
    }
    auto fd = stream_socket(blocking);
    if (!fd) {
        return fd.error();
    }
    if (::connect(fd->get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
        return sys_error("connecting to {}", path);
    }
    return fd;
}

Result<UniqueFd> listen_unix(const std::string& path, Blocking blocking, int backlog, SocketAccess access) {
    auto addr = unix_address(path);
    if (!addr) {
        return addr.error();
    }
    if (auto r = remove_stale_socket(path, *addr); !r) {
        return r.error();
    }
    auto fd = stream_socket(blocking);
    if (!fd) {
        return fd.error();
    }
    // bind(2) creates the socket file with mode 0777 less the umask, and
    // connecting needs write permission on it; pathname sockets honour the
    // permissions of their directory (unix(7), "Pathname socket ownership
    // and permissions"). fchmod(2) on the socket before bind is behaviour
    // no man page promises, and umask(2) is per process, racing every other
    // thread that creates files. So the socket is bound inside a fresh 0700
    // directory, made 0600 there where nobody else can reach it, and only
    // then, listening, linked to `path`. A shared socket gets its group and
    // mode there too.
    auto dir = PrivateDir::create_beside(path);
    if (!dir) {
        return dir.error();
    }
    auto inner = unix_address(dir->socket_path());
    if (!inner) {
        return inner.error();
    }
    if (::bind(fd->get(), reinterpret_cast<const sockaddr*>(&*inner), sizeof(*inner)) != 0) {
        return sys_error("binding socket {}", path);
    }
    if (access.group >= 0 &&
        ::fchownat(dir->fd(), PrivateDir::kName, static_cast<uid_t>(-1), static_cast<gid_t>(access.group),
                   AT_SYMLINK_NOFOLLOW) != 0) {
        return sys_error("giving socket {} group {}", path, access.group);
    }
    if (::fchmodat(dir->fd(), PrivateDir::kName, access.mode & 0777, 0) != 0) {
        return sys_error("setting socket {}'s mode to {:o}", path, access.mode & 0777);
    }
    if (::listen(fd->get(), backlog) != 0) {
        return sys_error("listening on socket {}", path);
    }
    if (auto r = publish(*dir, path); !r) {
        return r.error();
    }
    return fd;
}

}  // namespace sbx

// file_read and file_write (docs/agent-protocol.md, "Files"): contents
// stream through one fixed buffer of a DATA frame's size (reading) or one
// frame at a time (writing), so files of any size cost the same memory. A
// write lands in an unpredictable O_EXCL temporary file next to its target
// and is renamed over it only once complete and fsynced: readers see the
// old file or the new one, and every failure removes the temporary file.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest-agent/files/make_dirs.hpp"
#include "guest-agent/files/path_ops.hpp"
#include "guest-agent/files/upload.hpp"

namespace sbx::agent {
namespace {

using files::Owner;

Result<void> file_read(Session& session, const Json& request) {
    auto path = files::get_path(request, "path");
    auto offset = get_int(request, "offset", 0);
    auto length = get_int(request, "length", -1);
    if (!path || !offset || !length) {
        return (!path ? path.error() : !offset ? offset.error() : length.error());
    }
    const auto length_field = request.find("length");
    const bool has_length = length_field != request.end() && !length_field->is_null();
    if (*offset < 0 || (has_length && *length < 0)) {
        return make_error("\"offset\" and \"length\" must not be negative");
    }
    // O_NONBLOCK: opening a fifo must not hang the session (it is refused below).
    auto fd = UniqueFd::open(*path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (!fd) {
        return fd.error();
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) {
        return sys_error("stat {}", *path);
    }
    if (S_ISDIR(st.st_mode)) {
        return errno_error(*path, EISDIR);
    }
    if (!S_ISREG(st.st_mode)) {
        return make_error("{} is not a regular file", *path);
    }
    ::posix_fadvise(fd->get(), *offset, 0, POSIX_FADV_SEQUENTIAL);
    FrameStream& stream = session.stream();
    if (auto r = stream.write_message(
            Json{{"type", "started"}, {"size", st.st_size}, {"mode", st.st_mode & 07777}});
        !r) {
        return r;
    }
    // Read to the end rather than to st_size: /proc files say 0 and have more.
    std::uint64_t remaining = *length < 0 ? UINT64_MAX : static_cast<std::uint64_t>(*length);
    auto position = static_cast<off_t>(*offset);
    std::uint64_t sent = 0;
    std::vector<std::uint8_t> buffer(kMaxDataPayload);
    while (remaining > 0) {
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(remaining, buffer.size()));
        const ssize_t n = ::pread(fd->get(), buffer.data(), want, position);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return sys_error("reading {}", *path);
        }
        if (n == 0) {
            break;
        }
        if (auto r = stream.write_data(Channel::Content, sent,
                                       std::span(buffer).first(static_cast<std::size_t>(n)));
            !r) {
            return r;
        }
        position += n;
        sent += static_cast<std::uint64_t>(n);
        remaining -= static_cast<std::uint64_t>(n);
    }
    if (auto r = stream.write_eof(Channel::Content); !r) {
        return r;
    }
    return stream.write_message(Json{{"type", "result"}, {"bytes", sent}});
}

// Where file_write's bytes go: a temporary file renamed over the target on
// commit(), or the target itself when appending. Destroyed uncommitted, it
// removes the temporary file.
class WriteTarget {
public:
    static Result<WriteTarget> replace(UniqueFd dir, const std::string& name, const std::string& path) {
        WriteTarget t;
        t.dir_ = std::move(dir);
        t.name_ = name;
        t.path_ = path;
        for (int attempt = 0; attempt < 8 && !t.fd_; ++attempt) {
            std::uint64_t random = 0;
            if (::getrandom(&random, sizeof random, 0) != sizeof random) {
                return sys_error("getrandom");
            }
            // The name fits NAME_MAX even for a 255-byte target name.
            t.temp_ = fmt::format(".{}.sbx-{:016x}", name.substr(0, 200), random);
            t.fd_.reset(::openat(t.dir_.get(), t.temp_.c_str(),
                                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
            if (!t.fd_ && errno != EEXIST) {
                return sys_error("creating a temporary file next to {}", path);
            }
        }
        if (!t.fd_) {
            return make_error("no free temporary name next to {}", path);
        }
        return t;
    }

    // Appends in place; `created` tells whether the file is new (and so takes mode and owner).
    static Result<WriteTarget> append(UniqueFd dir, const std::string& name, const std::string& path) {
        WriteTarget t;
        t.dir_ = std::move(dir);
        t.name_ = name;
        t.path_ = path;
        t.fd_.reset(
            ::openat(t.dir_.get(), name.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
        t.created_ = t.fd_.valid();
        if (!t.fd_ && errno == EEXIST) {
            t.fd_.reset(::openat(t.dir_.get(), name.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
        }
        if (!t.fd_) {
            return sys_error("opening {}", path);
        }
        return t;
    }

    WriteTarget(WriteTarget&&) noexcept = default;
    WriteTarget& operator=(WriteTarget&&) = delete;
    ~WriteTarget() {
        if (!temp_.empty() && dir_) {
            ::unlinkat(dir_.get(), temp_.c_str(), 0);
        }
    }

    [[nodiscard]] Result<void> write(std::span<const std::uint8_t> bytes) {
        if (auto r = write_all(fd_.get(), bytes.data(), bytes.size()); !r) {
            return errno_error(fmt::format("writing {}", path_), r.error().errno_value);
        }
        return ok();
    }

    [[nodiscard]] Result<void> commit(std::uint32_t mode, const Owner& owner) {
        if (::fsync(fd_.get()) != 0) {
            return sys_error("fsync {}", path_);
        }
        const bool takes_attributes = !temp_.empty() || created_;
        if (takes_attributes) {
            // chown first: it clears set-id bits that the mode may ask for.
            if (auto r = files::apply_owner(fd_.get(), owner); !r) {
                return r.error().context(path_);
            }
            if (::fchmod(fd_.get(), mode) != 0) {
                return sys_error("chmod {}", path_);
            }
        }
        if (!temp_.empty()) {
            if (::renameat(dir_.get(), temp_.c_str(), dir_.get(), name_.c_str()) != 0) {
                return sys_error("renaming the temporary file over {}", path_);
            }
            temp_.clear();
            ::fsync(dir_.get());  // the rename itself survives a crash; failure here changes nothing
        }
        return ok();
    }

private:
    WriteTarget() = default;
    UniqueFd dir_;
    std::string name_;
    std::string path_;
    std::string temp_;  // empty once renamed, or when appending
    UniqueFd fd_;
    bool created_ = false;
};

Result<WriteTarget> open_write_target(const Json& request, const std::string& path, const Owner& owner) {
    auto mkdirs = get_bool(request, "mkdirs", false);
    auto append = get_bool(request, "append", false);
    if (!mkdirs || !append) {
        return (!mkdirs ? mkdirs : append).error();
    }
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
    const std::string name = path.substr(slash + 1);
    if (name.empty() || name == "." || name == "..") {
        return errno_error(path, EISDIR);
    }
    if (*mkdirs) {
        if (auto r = files::make_dirs(dir, 0755, owner); !r) {
            return r.error();
        }
    }
    auto dir_fd = UniqueFd::open(dir, O_RDONLY | O_DIRECTORY);
    if (!dir_fd) {
        return dir_fd.error();
    }
    struct stat st {};
    if (::fstatat(dir_fd->get(), name.c_str(), &st, 0) == 0 && S_ISDIR(st.st_mode)) {
        return errno_error(path, EISDIR);
    }
    return *append ? WriteTarget::append(std::move(*dir_fd), name, path)
                   : WriteTarget::replace(std::move(*dir_fd), name, path);
}

Result<void> file_write(Session& session, const Json& request) {
    auto path = files::get_path(request, "path");
    auto mode = files::get_mode(request, "mode", 0644);
    if (!path || !mode) {
        return !path ? path.error() : mode.error();
    }
    auto owner = files::get_owner(request, session.agent().options().default_user);
    if (!owner) {
        return owner.error();
    }
    auto target = open_write_target(request, *path, *owner);
    if (!target) {
        return target.error();
    }
    // On an error the temporary file goes first; the session then discards the rest of the DATA.
    auto received =
        files::receive_upload(session, [&](std::span<const std::uint8_t> bytes) { return target->write(bytes); });
    if (!received || !*received) {
        return received ? ok() : Result<void>(received.error());
    }
    if (auto r = target->commit(*mode, *owner); !r) {
        return r;
    }
    return session.stream().write_message(Json{{"type", "result"}, {"bytes", **received}});
}

}  // namespace

void register_file_ops(OpTable& ops) {
    ops.emplace("file_read", file_read);
    ops.emplace("file_write", file_write);
    files::register_path_ops(ops);
}

}  // namespace sbx::agent

#include "guest-agent/files/tree_extractor.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sbx::agent::files {
namespace {

// Beyond this many directories, or this many bytes of their names, modes
// and times are applied at once instead of at the end, so memory stays
// bounded whatever the archive holds.
constexpr std::size_t kMaxDeferredDirs = 100'000;
constexpr std::size_t kMaxDeferredBytes = 16 << 20;

std::vector<std::string_view> split(std::string_view path) {
    std::vector<std::string_view> parts;
    while (!path.empty()) {
        const auto slash = path.find('/');
        std::string_view part = path.substr(0, slash);
        if (!part.empty() && part != ".") {
            parts.push_back(part);
        }
        if (slash == std::string_view::npos) {
            break;
        }
        path.remove_prefix(slash + 1);
    }
    return parts;
}

// A link's target stays below the root when it only climbs at its start
// (each ".." to a real parent, since extraction never follows links) and
// no further than the link's own depth; then every name walks downwards.
Result<void> check_symlink_target(std::size_t depth, std::string_view target, const std::string& shown) {
    if (target.empty() || target.find('\0') != std::string_view::npos) {
        return make_error("entry \"{}\": empty or invalid symlink target", shown);
    }
    if (target.starts_with('/')) {
        return make_error("entry \"{}\": refusing a symlink to an absolute path ({})", shown,
                          shown_path(target));
    }
    bool descended = false;
    for (std::string_view part : split(target)) {
        if (part != "..") {
            descended = true;
        } else if (descended || depth-- == 0) {
            return make_error("entry \"{}\": refusing a symlink that may lead outside the target ({})", shown,
                              shown_path(target));
        }
    }
    return ok();
}

timespec to_timespec(std::int64_t seconds, std::uint32_t nsec) {
    timespec t{};
    t.tv_sec = static_cast<time_t>(seconds);
    t.tv_nsec = static_cast<long>(nsec % 1'000'000'000);
    return t;
}

}  // namespace

std::string shown_path(std::string_view path) {
    constexpr std::size_t kShown = 200;
    return path.size() <= kShown ? std::string(path) : fmt::format("{}...", path.substr(0, kShown));
}

Result<std::vector<std::string>> archive_path_parts(std::string_view path) {
    if (path.find('\0') != std::string_view::npos) {
        return make_error("entry \"{}\": a NUL byte in the name", shown_path(path));
    }
    if (path.starts_with('/')) {
        return make_error("entry \"{}\": refusing an absolute path", shown_path(path));
    }
    std::vector<std::string> parts;
    for (std::string_view part : split(path)) {
        if (part == "..") {
            return make_error("entry \"{}\": refusing a path with \"..\"", shown_path(path));
        }
        parts.emplace_back(part);
    }
    return parts;
}

TreeExtractor::~TreeExtractor() {
    if (file_) {
        ::unlinkat(file_->parent.get(), file_->leaf.c_str(), 0);  // cut short: don't leave half a file
    }
}

Result<UniqueFd> TreeExtractor::open_dir(std::span<const std::string> parts, bool create,
                                         const std::string& shown) {
    UniqueFd current;
    for (const std::string& part : parts) {
        const int at = current ? current.get() : root_fd_;
        int fd = ::openat(at, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && create) {
            if (::mkdirat(at, part.c_str(), 0755) != 0 && errno != EEXIST) {
                return sys_error("entry \"{}\": creating directory {}", shown, part);
            }
            fd = ::openat(at, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0) {
                UniqueFd created(fd);
                if (auto r = set_owner(fd); !r || ::fchmod(fd, 0755) != 0) {
                    return r ? sys_error("entry \"{}\": chmod {}", shown, part) : r.error();
                }
                fd = created.release();
            }
        }
        if (fd < 0) {
            if (errno == ELOOP || errno == ENOTDIR) {
                return make_error(
                    "entry \"{}\": \"{}\" is a symlink or not a directory; not extracting through it", shown,
                    part);
            }
            return sys_error("entry \"{}\": opening directory {}", shown, part);
        }
        current.reset(fd);
    }
    if (!current) {
        int fd = ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            return sys_error("duplicating the target directory");
        }
        current.reset(fd);
    }
    return current;
}

Result<int> TreeExtractor::parent_fd(const std::vector<std::string>& parts, const std::string& shown) {
    std::span<const std::string> parent(parts.data(), parts.size() - 1);
    if (!cached_fd_ ||
        !std::equal(parent.begin(), parent.end(), cached_parts_.begin(), cached_parts_.end())) {
        auto fd = open_dir(parent, true, shown);
        if (!fd) {
            cached_fd_.reset();
            return fd.error();
        }
        cached_fd_ = std::move(*fd);
        cached_parts_.assign(parent.begin(), parent.end());
    }
    return cached_fd_.get();
}

Result<void> TreeExtractor::clear_way(int parent, const std::string& leaf, const std::string& shown) {
    struct stat st {};
    if (::fstatat(parent, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return errno == ENOENT ? ok() : sys_error("entry \"{}\"", shown);
    }
    if (S_ISDIR(st.st_mode)) {
        return errno_error(fmt::format("entry \"{}\": a directory is in the way", shown), EISDIR);
    }
    if (::unlinkat(parent, leaf.c_str(), 0) != 0 && errno != ENOENT) {
        return sys_error("entry \"{}\": removing what was there", shown);
    }
    return ok();
}

Result<void> TreeExtractor::set_owner(int fd) {
    if (!options_.uid && !options_.gid) {
        return ok();
    }
    const auto uid = options_.uid ? static_cast<uid_t>(*options_.uid) : static_cast<uid_t>(-1);
    const auto gid = options_.gid ? static_cast<gid_t>(*options_.gid) : static_cast<gid_t>(-1);
    if (::fchown(fd, uid, gid) != 0) {
        return sys_error("chown");
    }
    return ok();
}

Result<void> TreeExtractor::begin_entry(const tar::Entry& entry) {
    const std::string shown = shown_path(entry.path);
    auto parts = archive_path_parts(entry.path);
    if (!parts) {
        return parts.error();
    }
    if (entry.type == tar::EntryType::Other) {
        ++skipped_;
        return ok();
    }
    if (parts->empty()) {
        if (entry.type != tar::EntryType::Directory) {
            return make_error("entry \"{}\": no name", shown);
        }
        ++extracted_;  // the root itself: it exists, and its mode is the receiver's business
        return ok();
    }
    switch (entry.type) {
        case tar::EntryType::Directory:
            return directory(entry, std::move(*parts), shown);
        case tar::EntryType::Symlink:
            return symlink(entry, *parts, shown);
        case tar::EntryType::HardLink:
            return hard_link(entry, *parts, shown);
        default:
            break;
    }
    auto parent = parent_fd(*parts, shown);
    if (!parent) {
        return parent.error();
    }
    const std::string& leaf = parts->back();
    if (auto r = clear_way(*parent, leaf, shown); !r) {
        return r;
    }
    UniqueFd parent_copy(::fcntl(*parent, F_DUPFD_CLOEXEC, 0));
    UniqueFd fd(::openat(*parent, leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd || !parent_copy) {
        return sys_error("entry \"{}\": creating the file", shown);
    }
    file_ = OpenFile{std::move(parent_copy), leaf, std::move(fd), entry};
    return ok();
}

Result<void> TreeExtractor::entry_data(std::span<const std::uint8_t> bytes) {
    if (!file_) {
        return make_error("file data outside a file entry");
    }
    if (auto r = write_all(file_->fd.get(), bytes.data(), bytes.size()); !r) {
        return errno_error(fmt::format("entry \"{}\": writing", shown_path(file_->entry.path)),
                           r.error().errno_value);
    }
    return ok();
}

Result<void> TreeExtractor::end_entry() {
    if (!file_) {
        return ok();
    }
    const tar::Entry& e = file_->entry;
    const int fd = file_->fd.get();
    const timespec times[2] = {{0, UTIME_OMIT}, to_timespec(e.mtime, e.mtime_nsec)};
    if (auto r = set_owner(fd); !r) {
        return r.error().context(fmt::format("entry \"{}\"", shown_path(e.path)));
    }
    if (::fchmod(fd, e.mode & options_.mode_mask) != 0 || ::futimens(fd, times) != 0) {
        return sys_error("entry \"{}\": setting mode and time", shown_path(e.path));
    }
    file_.reset();
    ++extracted_;
    return ok();
}

Result<void> TreeExtractor::directory(const tar::Entry& entry, std::vector<std::string> parts,
                                      const std::string& shown) {
    auto parent = parent_fd(parts, shown);
    if (!parent) {
        return parent.error();
    }
    const std::string& leaf = parts.back();
    if (::mkdirat(*parent, leaf.c_str(), 0700) != 0) {
        struct stat st {};
        if (errno != EEXIST || ::fstatat(*parent, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            return sys_error("entry \"{}\": creating the directory", shown);
        }
        if (!S_ISDIR(st.st_mode)) {
            if (::unlinkat(*parent, leaf.c_str(), 0) != 0 || ::mkdirat(*parent, leaf.c_str(), 0700) != 0) {
                return sys_error("entry \"{}\": replacing a non-directory", shown);
            }
        }
    }
    if (options_.uid || options_.gid) {
        UniqueFd fd(::openat(*parent, leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!fd) {
            return sys_error("entry \"{}\": opening the directory", shown);
        }
        if (auto r = set_owner(fd.get()); !r) {
            return r.error().context(fmt::format("entry \"{}\"", shown));
        }
    }
    std::size_t bytes = 0;
    for (const std::string& part : parts) {
        bytes += part.size() + sizeof(std::string);
    }
    DeferredDir dir{std::move(parts), entry.mode & options_.mode_mask, entry.mtime, entry.mtime_nsec};
    ++extracted_;
    if (dirs_.size() >= kMaxDeferredDirs || deferred_bytes_ + bytes > kMaxDeferredBytes) {
        return apply_dir(dir);
    }
    deferred_bytes_ += bytes;
    dirs_.push_back(std::move(dir));
    return ok();
}

Result<void> TreeExtractor::symlink(const tar::Entry& entry, const std::vector<std::string>& parts,
                                    const std::string& shown) {
    if (auto r = check_symlink_target(parts.size() - 1, entry.link_target, shown); !r) {
        return r;
    }
    auto parent = parent_fd(parts, shown);
    if (!parent) {
        return parent.error();
    }
    const std::string& leaf = parts.back();
    if (auto r = clear_way(*parent, leaf, shown); !r) {
        return r;
    }
    if (::symlinkat(entry.link_target.c_str(), *parent, leaf.c_str()) != 0) {
        return sys_error("entry \"{}\": creating the symlink", shown);
    }
    if (options_.uid || options_.gid) {
        const auto uid = options_.uid ? static_cast<uid_t>(*options_.uid) : static_cast<uid_t>(-1);
        const auto gid = options_.gid ? static_cast<gid_t>(*options_.gid) : static_cast<gid_t>(-1);
        if (::fchownat(*parent, leaf.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
            return sys_error("entry \"{}\": chown", shown);
        }
    }
    const timespec times[2] = {{0, UTIME_OMIT}, to_timespec(entry.mtime, entry.mtime_nsec)};
    ::utimensat(*parent, leaf.c_str(), times, AT_SYMLINK_NOFOLLOW);  // best effort: some file systems refuse
    ++extracted_;
    return ok();
}

Result<void> TreeExtractor::hard_link(const tar::Entry& entry, const std::vector<std::string>& parts,
                                      const std::string& shown) {
    auto source = archive_path_parts(entry.link_target);
    if (!source) {
        return make_error("entry \"{}\": hard link: {}", shown, source.error().message);
    }
    if (source->empty()) {
        return make_error("entry \"{}\": hard link to nothing", shown);
    }
    // The source is looked up the same way as any entry: below the root, through no symlink.
    auto source_parent = open_dir(std::span(*source).first(source->size() - 1), false, shown);
    if (!source_parent) {
        return source_parent.error();
    }
    auto parent = parent_fd(parts, shown);
    if (!parent) {
        return parent.error();
    }
    const std::string& leaf = parts.back();
    if (auto r = clear_way(*parent, leaf, shown); !r) {
        return r;
    }
    if (::linkat(source_parent->get(), source->back().c_str(), *parent, leaf.c_str(), 0) != 0) {
        return sys_error("entry \"{}\": hard link to \"{}\"", shown, shown_path(entry.link_target));
    }
    ++extracted_;
    return ok();
}

Result<void> TreeExtractor::apply_dir(const DeferredDir& dir) {
    std::string path;
    for (const std::string& part : dir.parts) {
        path += (path.empty() ? "" : "/") + part;
    }
    const std::string shown = shown_path(path);
    auto fd = open_dir(dir.parts, false, shown);
    if (!fd) {
        return fd.error();
    }
    const timespec times[2] = {{0, UTIME_OMIT}, to_timespec(dir.mtime, dir.mtime_nsec)};
    if (::fchmod(fd->get(), dir.mode) != 0 || ::futimens(fd->get(), times) != 0) {
        return sys_error("entry \"{}\": setting mode and time", shown);
    }
    return ok();
}

Result<void> TreeExtractor::finish() {
    if (file_) {
        return make_error("the archive ended inside a file");
    }
    cached_fd_.reset();
    // Deepest first would not matter for modes; reverse order keeps a
    // parent's time from being disturbed by work on its children.
    for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
        if (auto r = apply_dir(*it); !r) {
            return r;
        }
    }
    dirs_.clear();
    deferred_bytes_ = 0;
    return ok();
}

}  // namespace sbx::agent::files

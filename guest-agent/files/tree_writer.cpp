#include "guest-agent/files/tree_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>

#include "guest-agent/files/dir_names.hpp"

namespace sbx::agent::files {
namespace {

tar::Entry entry_for(std::string path, tar::EntryType type, const struct stat& st) {
    tar::Entry e;
    e.path = std::move(path);
    e.type = type;
    e.mode = st.st_mode & 07777;
    e.uid = st.st_uid;
    e.gid = st.st_gid;
    e.size = type == tar::EntryType::File ? static_cast<std::uint64_t>(st.st_size) : 0;
    e.mtime = st.st_mtim.tv_sec;
    return e;
}

Result<void> add_file(tar::TarWriter& writer, std::string path, int fd, const struct stat& st) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return writer.add_file(entry_for(std::move(path), tar::EntryType::File, st), fd);
}

Result<std::string> read_link_at(int dir_fd, const std::string& name) {
    std::string target(4096, '\0');
    const ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
    if (n < 0) {
        return sys_error("reading the symlink {}", name);
    }
    target.resize(static_cast<std::size_t>(n));
    return target;
}

// One directory level; `prefix` is the archive path of the directory ("" or "a/b/").
Result<void> write_dir(tar::TarWriter& writer, int dir_fd, const std::string& prefix, TreeStats& stats) {
    auto names = read_dir_names(dir_fd, SIZE_MAX - 1);
    if (!names) {
        return names.error().context(prefix.empty() ? "." : prefix);
    }
    for (const std::string& name : *names) {
        const std::string path = prefix + name;
        struct stat st {};
        if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) {
                continue;  // removed while we walked
            }
            return sys_error("stat {}", path);
        }
        if (S_ISDIR(st.st_mode)) {
            UniqueFd child(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (!child) {
                if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) {
                    continue;  // replaced while we walked
                }
                return sys_error("opening {}", path);
            }
            if (auto r = writer.add(entry_for(path + "/", tar::EntryType::Directory, st)); !r) {
                return r;
            }
            ++stats.entries;
            if (auto r = write_dir(writer, child.get(), path + "/", stats); !r) {
                return r;
            }
        } else if (S_ISREG(st.st_mode)) {
            // O_NONBLOCK: if the file was swapped for a fifo, opening must not hang.
            UniqueFd file(
                ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
            if (!file || ::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
                if (!file && errno != ENOENT && errno != ELOOP) {
                    return sys_error("opening {}", path);
                }
                continue;
            }
            if (auto r = add_file(writer, path, file.get(), st); !r) {
                return r;
            }
            ++stats.entries;
        } else if (S_ISLNK(st.st_mode)) {
            auto target = read_link_at(dir_fd, name);
            if (!target) {
                if (target.error().errno_value == ENOENT) {
                    continue;
                }
                return target.error();
            }
            auto entry = entry_for(path, tar::EntryType::Symlink, st);
            entry.link_target = std::move(*target);
            if (auto r = writer.add(entry); !r) {
                return r;
            }
            ++stats.entries;
        } else {
            ++stats.skipped;
        }
    }
    return ok();
}

}  // namespace

Result<TreeRoot> open_tree_root(const std::string& path) {
    TreeRoot root;
    if (::stat(path.c_str(), &root.st) != 0) {
        return sys_error("{}", path);
    }
    if (!S_ISDIR(root.st.st_mode) && !S_ISREG(root.st.st_mode)) {
        return make_error("{} is not a regular file or a directory", path);
    }
    auto fd = UniqueFd::open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (!fd) {
        return fd.error();
    }
    struct stat again {};
    if (::fstat(fd->get(), &again) != 0 || again.st_ino != root.st.st_ino || again.st_dev != root.st.st_dev) {
        return make_error("{} changed while being opened", path);
    }
    root.fd = std::move(*fd);
    std::string_view trimmed = path;
    while (trimmed.size() > 1 && trimmed.ends_with('/')) {
        trimmed.remove_suffix(1);
    }
    root.name = std::string(trimmed.substr(trimmed.rfind('/') + 1));
    return root;
}

Result<TreeStats> write_tree(tar::TarWriter& writer, const TreeRoot& root) {
    TreeStats stats;
    if (S_ISDIR(root.st.st_mode)) {
        if (auto r = write_dir(writer, root.fd.get(), "", stats); !r) {
            return r.error();
        }
        return stats;
    }
    if (auto r = add_file(writer, root.name, root.fd.get(), root.st); !r) {
        return r.error();
    }
    stats.entries = 1;
    return stats;
}

}  // namespace sbx::agent::files

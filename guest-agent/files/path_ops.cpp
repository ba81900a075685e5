// stat, list, mkdir, remove and rename (docs/agent-protocol.md, "Files").
// Recursive removal walks with openat/unlinkat and never follows a
// symlink, so a link inside the tree cannot take it anywhere else.
#include "guest-agent/files/path_ops.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest-agent/files/dir_names.hpp"
#include "guest-agent/files/make_dirs.hpp"

namespace sbx::agent::files {
namespace {

constexpr std::size_t kMaxListEntries = 100'000;
// A list reply is split into messages of about this many bytes, well
// under the 64 KiB JSON frame limit even with the largest entry.
constexpr std::size_t kListBatchBytes = 48 * 1024;

std::string_view kind_of(mode_t mode) {
    if (S_ISREG(mode)) {
        return "file";
    }
    if (S_ISDIR(mode)) {
        return "dir";
    }
    if (S_ISLNK(mode)) {
        return "symlink";
    }
    return "other";
}

Result<void> stat_op(Session& session, const Json& request) {
    auto path = get_path(request, "path");
    auto follow = get_bool(request, "follow", false);
    if (!path || !follow) {
        return !path ? path.error() : follow.error();
    }
    struct stat st {};
    if ((*follow ? ::stat(path->c_str(), &st) : ::lstat(path->c_str(), &st)) != 0) {
        return sys_error("{}", *path);
    }
    Json reply{{"type", "result"},          {"kind", kind_of(st.st_mode)},
               {"size", st.st_size},        {"mode", st.st_mode & 07777},
               {"uid", st.st_uid},          {"gid", st.st_gid},
               {"mtime", st.st_mtim.tv_sec}};
    if (S_ISLNK(st.st_mode)) {
        std::string target(4096, '\0');
        const ssize_t n = ::readlink(path->c_str(), target.data(), target.size());
        if (n < 0) {
            return sys_error("readlink {}", *path);
        }
        target.resize(static_cast<std::size_t>(n));
        reply["target"] = target;
    }
    return session.stream().write_message(reply);
}

Result<void> list_op(Session& session, const Json& request) {
    auto path = get_path(request, "path");
    if (!path) {
        return path.error();
    }
    auto dir = UniqueFd::open(*path, O_RDONLY | O_DIRECTORY);
    if (!dir) {
        return dir.error();
    }
    auto names = read_dir_names(dir->get(), kMaxListEntries);
    if (!names) {
        return names.error().context(*path);
    }
    FrameStream& stream = session.stream();
    if (names->size() > kMaxListEntries) {
        return stream.write_message(
            error_message(code::kLimit, fmt::format("{} has more than {} entries", *path, kMaxListEntries)));
    }
    // Batches of {"type":"entries"}, the last one in the final result.
    Json batch = Json::array();
    std::size_t batch_bytes = 0;
    for (const std::string& name : *names) {
        struct stat st {};
        if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            continue;  // removed since it was listed
        }
        Json entry{{"name", name},
                   {"kind", kind_of(st.st_mode)},
                   {"size", st.st_size},
                   {"mode", st.st_mode & 07777},
                   {"mtime", st.st_mtim.tv_sec}};
        // A name is at most 255 bytes, 6 when escaped: 2 KiB covers any entry.
        batch_bytes += 100 + 6 * name.size();
        batch.push_back(std::move(entry));
        if (batch_bytes >= kListBatchBytes) {
            if (auto r = stream.write_message(Json{{"type", "entries"}, {"entries", std::move(batch)}}); !r) {
                return r;
            }
            batch = Json::array();
            batch_bytes = 0;
        }
    }
    return stream.write_message(Json{{"type", "result"}, {"entries", std::move(batch)}});
}

Result<void> mkdir_op(Session& session, const Json& request) {
    auto path = get_path(request, "path");
    auto mode = get_mode(request, "mode", 0755);
    auto parents = get_bool(request, "parents", true);
    if (!path || !mode || !parents) {
        return !path ? path.error() : !mode ? mode.error() : parents.error();
    }
    auto owner = get_owner(request, session.agent().options().default_user);
    if (!owner) {
        return owner.error();
    }
    if (*parents) {
        if (auto r = make_dirs(*path, *mode, *owner); !r) {
            return r;
        }
    } else {
        if (::mkdir(path->c_str(), *mode) != 0) {
            return sys_error("mkdir {}", *path);
        }
        auto fd = UniqueFd::open(*path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (!fd) {
            return fd.error();
        }
        if (auto r = apply_owner(fd->get(), *owner); !r) {
            return r.error().context(*path);
        }
        if (::fchmod(fd->get(), *mode) != 0) {
            return sys_error("chmod {}", *path);
        }
    }
    return session.stream().write_message(Json{{"type", "result"}});
}

// Removes `name` in `dir_fd` and everything below it, following no symlink.
// `shown` names it in errors. Entries that vanish meanwhile are no error.
Result<void> remove_tree_at(int dir_fd, const std::string& name, const std::string& shown) {
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return errno == ENOENT ? ok() : sys_error("stat {}", shown);
    }
    if (S_ISDIR(st.st_mode)) {
        UniqueFd child(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!child) {
            return sys_error("opening {}", shown);
        }
        auto names = read_dir_names(child.get(), SIZE_MAX - 1);
        if (!names) {
            return names.error().context(shown);
        }
        for (const std::string& entry : *names) {
            if (auto r = remove_tree_at(child.get(), entry, shown + "/" + entry); !r) {
                return r;
            }
        }
    }
    if (::unlinkat(dir_fd, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT) {
        return sys_error("removing {}", shown);
    }
    return ok();
}

Result<void> remove_op(Session& session, const Json& request) {
    auto path = get_path(request, "path");
    auto recursive = get_bool(request, "recursive", false);
    if (!path || !recursive) {
        return !path ? path.error() : recursive.error();
    }
    std::string_view trimmed = *path;
    while (trimmed.size() > 1 && trimmed.ends_with('/')) {
        trimmed.remove_suffix(1);
    }
    const auto slash = trimmed.rfind('/');
    const std::string name(trimmed.substr(slash + 1));
    if (name.empty() || name == "." || name == "..") {
        return make_error("refusing to remove {}", *path);
    }
    auto parent =
        UniqueFd::open(slash == 0 ? "/" : std::string(trimmed.substr(0, slash)), O_RDONLY | O_DIRECTORY);
    if (!parent) {
        return parent.error();
    }
    struct stat st {};
    if (::fstatat(parent->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return sys_error("{}", *path);
    }
    if (*recursive) {
        if (auto r = remove_tree_at(parent->get(), name, *path); !r) {
            return r;
        }
    } else if (::unlinkat(parent->get(), name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0) {
        return sys_error("removing {}", *path);
    }
    return session.stream().write_message(Json{{"type", "result"}});
}

Result<void> rename_op(Session& session, const Json& request) {
    auto from = get_path(request, "from");
    auto to = get_path(request, "to");
    if (!from || !to) {
        return !from ? from.error() : to.error();
    }
    if (::rename(from->c_str(), to->c_str()) != 0) {
        return sys_error("renaming {} to {}", *from, *to);
    }
    return session.stream().write_message(Json{{"type", "result"}});
}

}  // namespace

void register_path_ops(OpTable& ops) {
    ops.emplace("stat", stat_op);
    ops.emplace("list", list_op);
    ops.emplace("mkdir", mkdir_op);
    ops.emplace("remove", remove_op);
    ops.emplace("rename", rename_op);
}

}  // namespace sbx::agent::files

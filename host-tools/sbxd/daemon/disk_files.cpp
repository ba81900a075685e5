// The file routes of a sandbox with no VMM (docs/api.md, "Files"): stat,
// list, download and a tar of a tree read its root disk with diskfs
// (libext2fs over the qcow2 chain), with the agent's response shapes and
// archive layout (docs/agent-protocol.md, tar_get); the disk is not
// written and the sandbox stays as it is. Uploads, mkdir and remove need
// its agent: invalid_state, saying to resume it.
#include <memory>
#include <set>

#include "base/log.hpp"
#include "guest-agent/files/tar_writer.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"
#include "host-tools/sbxd/diskfs/disk_fs.hpp"

namespace sbx::sbxd {

namespace {

using http::Response;
using nlohmann::json;
namespace tar = agent::tar;

// A paused sandbox wakes instead when something can wake it (product.md §2).
bool reads_disk(SandboxState state, bool wakes) {
    return state == SandboxState::Stopped || (state == SandboxState::Paused && !wakes) ||
           state == SandboxState::Crashed;
}

// diskfs' codes as the API's, as guest_error does for the agent's.
Error disk_error(const Error& error) {
    namespace dc = diskfs::code;
    const std::string& c = error.code;
    auto as = [&](std::string_view api_code) { return Error{error.to_string(), 0, std::string(api_code)}; };
    if (c == dc::kNotFound) {
        return as(api::code::kNotFound);
    }
    if (c == dc::kNotADirectory || c == dc::kNotAFile || c == dc::kBadPath || c == dc::kSymlinkLoop) {
        return as(api::code::kInvalidArgument);
    }
    if (c == dc::kLimit) {
        return as(api::code::kLimitReached);
    }
    if (c == dc::kNeedsRecovery || c == dc::kUnsupported) {
        return as(api::code::kInvalidState);
    }
    return as(api::code::kInternal);  // corrupt_disk, io_error
}

Result<std::shared_ptr<diskfs::DiskFs>> open_disk(const std::string& disk) {
    auto fs = diskfs::DiskFs::open(disk);
    if (!fs) {
        return disk_error(fs.error());
    }
    return std::shared_ptr<diskfs::DiskFs>(std::move(*fs));
}

json stat_json(const std::string& path, const diskfs::Stat& st) {
    json out = {{"path", path},      {"type", diskfs::kind_name(st.kind)},
                {"size", st.size},   {"mode", st.mode},
                {"mtime", st.mtime}, {"uid", st.uid},
                {"gid", st.gid}};
    if (st.kind == diskfs::Kind::Symlink) {
        out["target"] = st.target;
    }
    return out;
}

// A tar walk holds the listed entries of every directory it is inside of;
// past this many (a crafted disk: directories of many entries nested in
// each other) it stops with kLimit rather than grow.
constexpr std::size_t kMaxPendingEntries = 2 * diskfs::kMaxListEntries;
// Pieces of the archive handed to the response (and so its memory).
constexpr std::size_t kTarChunk = std::size_t{256} << 10;

tar::Entry tar_entry(std::string path, tar::EntryType type, const diskfs::Stat& st) {
    tar::Entry e;
    e.path = std::move(path);
    e.type = type;
    e.mode = st.mode & 07777;
    e.uid = st.uid;
    e.gid = st.gid;
    e.size = type == tar::EntryType::File ? st.size : 0;
    e.mtime = st.mtime;
    return e;
}

Result<void> add_disk_file(diskfs::DiskFs& fs, tar::TarWriter& writer, std::string name,
                           const std::string& shown, const diskfs::Stat& st) {
    return writer.add_content(tar_entry(std::move(name), tar::EntryType::File, st),
                              [&](const tar::ByteSink& sink) -> Result<void> {
                                  auto read = fs.read_at(st.ino, shown, sink);
                                  return read ? ok() : Result<void>(read.error());
                              });
}

struct DiskTreeStats {
    std::uint64_t entries = 0;
    std::uint64_t skipped = 0;
};

// The tree at `path` as tar_get archives a guest's (tree_writer.cpp): a
// directory's contents with names relative to it ("d/" for directories,
// sorted by name, none for the directory itself), or one regular file
// named by its last component; symlinks below the root kept as links,
// never followed; anything else counted as skipped. The disk is the
// guest's: a directory met twice (a cycle of a crafted disk) and a name
// no real one has ('/' in it) are skipped, and the walk is depth-first
// with its held entries and its paths (so its depth) bounded.
Result<DiskTreeStats> write_disk_tree(diskfs::DiskFs& fs, const std::string& path, const diskfs::Stat& root,
                                      tar::TarWriter& writer) {
    DiskTreeStats stats;
    if (root.kind == diskfs::Kind::File) {
        std::string_view trimmed = path;
        while (trimmed.size() > 1 && trimmed.ends_with('/')) {
            trimmed.remove_suffix(1);
        }
        std::string name(trimmed.substr(trimmed.rfind('/') + 1));
        if (auto r = add_disk_file(fs, writer, std::move(name), path, root); !r) {
            return r.error();
        }
        stats.entries = 1;
        return stats;
    }
    struct Level {
        std::string shown;   // the guest path, for errors
        std::string prefix;  // the archive path of the directory: "" or "a/b/"
        std::vector<diskfs::DirEntry> entries;
        std::size_t next = 0;
    };
    auto top = fs.list_at(root.ino, path);
    if (!top) {
        return top.error();
    }
    std::size_t pending = top->size();
    std::vector<Level> stack;
    stack.push_back(Level{path, "", std::move(*top)});
    std::set<std::uint32_t> dirs_seen{root.ino};
    while (!stack.empty()) {
        Level& level = stack.back();
        if (level.next == level.entries.size()) {
            pending -= level.entries.size();
            stack.pop_back();
            continue;
        }
        const diskfs::DirEntry& e = level.entries[level.next++];
        if (e.name.empty() || e.name.find('/') != std::string::npos) {
            ++stats.skipped;
            continue;
        }
        const std::string name = level.prefix + e.name;
        if (name.size() > diskfs::kMaxPath) {
            return make_coded_error(diskfs::code::kBadPath, "{}...: a path over {} bytes",
                                    name.substr(0, 200), diskfs::kMaxPath);
        }
        const std::string shown = (level.shown.ends_with('/') ? level.shown : level.shown + "/") + e.name;
        switch (e.stat.kind) {
            case diskfs::Kind::Dir: {
                if (!dirs_seen.insert(e.stat.ino).second) {
                    ++stats.skipped;
                    continue;
                }
                if (auto r = writer.add(tar_entry(name + "/", tar::EntryType::Directory, e.stat)); !r) {
                    return r.error();
                }
                ++stats.entries;
                auto entries = fs.list_at(e.stat.ino, shown);
                if (!entries) {
                    return entries.error();
                }
                pending += entries->size();
                if (pending > kMaxPendingEntries) {
                    return make_coded_error(diskfs::code::kLimit,
                                            "{}: more than {} entries below open directories", shown,
                                            kMaxPendingEntries);
                }
                stack.push_back(Level{shown, name + "/", std::move(*entries)});  // `level` and `e` end here
                break;
            }
            case diskfs::Kind::File:
                if (auto r = add_disk_file(fs, writer, name, shown, e.stat); !r) {
                    return r.error();
                }
                ++stats.entries;
                break;
            case diskfs::Kind::Symlink: {
                auto link = fs.stat_at(e.stat.ino, shown);
                if (!link) {
                    return link.error();
                }
                auto entry = tar_entry(name, tar::EntryType::Symlink, *link);
                entry.link_target = link->target;
                if (auto r = writer.add(entry); !r) {
                    return r.error();
                }
                ++stats.entries;
                break;
            }
            case diskfs::Kind::Other:
                ++stats.skipped;
                break;
        }
    }
    return stats;
}

}  // namespace

Result<std::optional<std::string>> GuestRoutes::stopped_disk(const std::string& sandbox_id) const {
    auto sandbox = store_.get_sandbox(sandbox_id);
    if (!sandbox) {
        return sandbox.error();
    }
    if (!reads_disk(sandbox->state, static_cast<bool>(access_.wake))) {
        return std::optional<std::string>();
    }
    auto disk = driver_.disk(sandbox_id);
    if (!disk) {
        return disk.error();
    }
    return std::optional<std::string>(std::move(*disk));
}

Result<std::shared_ptr<agent::AgentClient>> GuestRoutes::connect_to_change(
    const std::string& sandbox_id) const {
    auto sandbox = store_.get_sandbox(sandbox_id);
    if (!sandbox) {
        return sandbox.error();
    }
    if (reads_disk(sandbox->state, static_cast<bool>(access_.wake))) {
        return make_coded_error(api::code::kInvalidState,
                                "sandbox {} is {}: its files can be read but not changed; resume it first "
                                "(POST /v1/sandboxes/{}/resume)",
                                sandbox_id, to_string(sandbox->state), sandbox_id);
    }
    return connect(sandbox_id);
}

Response GuestRoutes::disk_get_file(const std::string& disk, const std::string& path,
                                    const Request& request) const {
    auto fs = open_disk(disk);
    if (!fs) {
        return Response::error(fs.error(), request.request_id);
    }
    // Looked at first, as through the agent: a missing file or a directory
    // is an error status rather than a cut stream.
    auto st = (*fs)->stat(path, true);
    if (!st) {
        return Response::error(disk_error(st.error()), request.request_id);
    }
    if (st->kind != diskfs::Kind::File) {
        return Response::error(
            api::invalid_argument(
                fmt::format("{} is a {}, not a regular file", path,
                            st->kind == diskfs::Kind::Dir ? "directory" : diskfs::kind_name(st->kind))),
            request.request_id);
    }
    Response response;
    response.headers.emplace_back("Content-Type", "application/octet-stream");
    response.stream = [fs = *fs, path](http::BodyWriter& out) {
        auto sink = [&out](std::span<const std::uint8_t> data) -> Result<void> {
            return out.write(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
        };
        // After the 200 a failure can only cut the body short (no last chunk).
        auto read = fs->read(path, sink);
        if (!read && !out.cancelled()) {
            log::warn("download of {} from the disk failed: {}", path, read.error().to_string());
            out.cancel();
        }
    };
    return response;
}

Response GuestRoutes::disk_stat(const std::string& disk, const std::string& path,
                                const Request& request) const {
    auto fs = open_disk(disk);
    if (!fs) {
        return Response::error(fs.error(), request.request_id);
    }
    auto st = (*fs)->stat(path, false);
    if (!st) {
        return Response::error(disk_error(st.error()), request.request_id);
    }
    return Response::ok({{"stat", stat_json(path, *st)}}, request.request_id);
}

Response GuestRoutes::disk_list(const std::string& disk, const std::string& path,
                                const Request& request) const {
    auto fs = open_disk(disk);
    if (!fs) {
        return Response::error(fs.error(), request.request_id);
    }
    auto entries = (*fs)->list(path);
    if (!entries) {
        return Response::error(disk_error(entries.error()), request.request_id);
    }
    json list = json::array();
    for (const auto& e : *entries) {
        list.push_back({{"name", e.name},
                        {"type", diskfs::kind_name(e.stat.kind)},
                        {"size", e.stat.size},
                        {"mode", e.stat.mode},
                        {"mtime", e.stat.mtime}});
    }
    return Response::ok({{"entries", list}}, request.request_id);
}

Response GuestRoutes::disk_get_tar(const std::string& disk, const std::string& path,
                                   const Request& request) const {
    auto fs = open_disk(disk);
    if (!fs) {
        return Response::error(fs.error(), request.request_id);
    }
    // Looked at first, as through the agent: a missing path or a device is
    // an error status rather than a cut stream.
    auto root = (*fs)->stat(path, true);
    if (!root) {
        return Response::error(disk_error(root.error()), request.request_id);
    }
    if (root->kind != diskfs::Kind::File && root->kind != diskfs::Kind::Dir) {
        return Response::error(
            api::invalid_argument(fmt::format("{} is a {}, not a directory or a regular file", path,
                                              diskfs::kind_name(root->kind))),
            request.request_id);
    }
    Response response;
    response.headers.emplace_back("Content-Type", "application/x-tar");
    response.stream = [fs = *fs, path, root = *root](http::BodyWriter& out) {
        tar::TarWriter writer(
            [&out](std::span<const std::uint8_t> data) -> Result<void> {
                return out.write(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
            },
            kTarChunk);
        auto stats = write_disk_tree(*fs, path, root, writer);
        auto done = stats ? writer.finish() : Result<void>(stats.error());
        // After the 200 a failure can only cut the body short (no last chunk).
        if (!done && !out.cancelled()) {
            log::warn("tar of {} from the disk failed: {}", path, done.error().to_string());
            out.cancel();
        }
    };
    return response;
}

}  // namespace sbx::sbxd

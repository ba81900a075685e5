// The file routes of a sandbox with no VMM (docs/api.md, "Files"): stat,
// list and download read its root disk with diskfs (libext2fs over the
// qcow2 chain), with the agent's response shapes; the disk is not written
// and the sandbox stays as it is. Uploads, mkdir and remove need its
// agent: invalid_state, saying to resume it.
#include <memory>

#include "base/log.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"
#include "host-tools/sbxd/diskfs/disk_fs.hpp"

namespace sbx::sbxd {

namespace {

using http::Response;
using nlohmann::json;

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
    json out = {{"path", path},     {"type", diskfs::kind_name(st.kind)}, {"size", st.size}, {"mode", st.mode},
                {"mtime", st.mtime}, {"uid", st.uid},                      {"gid", st.gid}};
    if (st.kind == diskfs::Kind::Symlink) {
        out["target"] = st.target;
    }
    return out;
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

Result<void> GuestRoutes::refuse_stopped(const std::string& sandbox_id) const {
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
    return {};
}

Response GuestRoutes::disk_get_file(const std::string& disk, const std::string& path, const Request& request) const {
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
        return Response::error(api::invalid_argument(fmt::format(
                                   "{} is a {}, not a regular file", path,
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

Response GuestRoutes::disk_stat(const std::string& disk, const std::string& path, const Request& request) const {
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

Response GuestRoutes::disk_list(const std::string& disk, const std::string& path, const Request& request) const {
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

}  // namespace sbx::sbxd

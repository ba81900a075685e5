// Files in a running sandbox (docs/api.md, "Files"): contents streamed
// both ways in pieces of at most a DATA frame, whatever the file's size;
// trees as tar streams both ways (tar_get, tar_put: POSIX ustar with PAX
// headers, docs/agent-protocol.md); stat, list, mkdir and remove. Paths
// are absolute guest paths in the query (`?path=`); the agent checks them.
// A sandbox with no VMM is read from its disk instead (disk_files.cpp).
#include <sys/socket.h>

#include <charconv>
#include <limits>
#include <vector>

#include "base/log.hpp"
#include "guest-agent/files/files_client.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"

namespace sbx::sbxd {

namespace {

using http::Response;
using nlohmann::json;

Result<std::string> path_param(const std::map<std::string, std::string, std::less<>>& params) {
    auto it = params.find("path");
    if (it == params.end() || it->second.empty() || it->second.front() != '/') {
        return api::invalid_argument("path must be an absolute guest path (?path=/root/x)");
    }
    return it->second;
}

Result<bool> flag_param(const std::map<std::string, std::string, std::less<>>& params,
                        std::string_view name) {
    auto it = params.find(name);
    if (it == params.end() || it->second == "false" || it->second == "0") {
        return false;
    }
    if (it->second == "true" || it->second == "1") {
        return true;
    }
    return api::invalid_argument(fmt::format("{} must be true or false", name));
}

// The path of a route whose only query parameter is `path`.
Result<std::string> only_path(const http::Request& request) {
    auto query = query_params(request, {"path"});
    if (!query) {
        return query.error();
    }
    return path_param(*query);
}

const char* kind_name(std::string_view kind) {
    return kind == "file" ? "file" : kind == "dir" ? "dir" : kind == "symlink" ? "symlink" : "other";
}

// The request's body as an upload's source for the agent client; a read
// error is kept in ERROR, so that the answer names the body's failure
// rather than the agent's.
auto body_source(http::BodyReader& body, std::optional<Error>& error) {
    return [&body, &error](std::span<std::uint8_t> buffer) -> Result<std::size_t> {
        auto n = body.read(buffer);
        if (!n) {
            error = n.error();
        }
        return n;
    };
}

// A 200 whose body the agent's reply streams through SINK (READ(client,
// sink)); WHAT names it in the log. A failure after the 200 can only cut
// the body short: chunked coding then never sends its last chunk, which
// the client sees (RFC 9112 §7.1).
using Sink = std::function<Result<void>(std::span<const std::uint8_t>)>;
template <typename Read>
Response stream_from_agent(std::shared_ptr<agent::AgentClient> client, std::string content_type,
                           std::string what, Read read) {
    Response response;
    response.headers.emplace_back("Content-Type", std::move(content_type));
    response.stream = [client = std::move(client), what = std::move(what), read](http::BodyWriter& out) {
        auto hook = out.on_cancel([fd = client->stream().fd()] { ::shutdown(fd, SHUT_RDWR); });
        Sink sink = [&out](std::span<const std::uint8_t> data) -> Result<void> {
            return out.write(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
        };
        auto done = read(*client, sink);
        if (!done && !out.cancelled()) {
            log::warn("{} failed: {}", what, done.error().to_string());
            out.cancel();
        }
    };
    return response;
}

}  // namespace

Response GuestRoutes::read_path(const Request& request, const PathParams& params, DiskRead on_disk,
                                const AgentRead& on_agent) const {
    auto path = only_path(request);
    if (!path) {
        return Response::error(path.error(), request.request_id);
    }
    auto disk = stopped_disk(params.at("id"));
    if (!disk) {
        return Response::error(disk.error(), request.request_id);
    }
    if (*disk) {
        return (this->*on_disk)(**disk, *path, request);
    }
    auto client = connect(params.at("id"));
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    return on_agent(*client, *path);
}

Response GuestRoutes::get_file(const Request& request, const PathParams& params) const {
    return read_path(
        request, params, &GuestRoutes::disk_get_file, [&](const auto& client, const std::string& path) {
            // Looked at first, so that a missing file or a directory is an
            // error status rather than a cut stream.
            auto info = agent::files::stat(*client, path, true);
            if (!info) {
                return Response::error(guest_error(info.error()), request.request_id);
            }
            if (info->kind != "file") {
                return Response::error(
                    api::invalid_argument(fmt::format("{} is a {}, not a regular file", path,
                                                      info->kind == "dir" ? "directory" : info->kind)),
                    request.request_id);
            }
            return stream_from_agent(client, "application/octet-stream", "download of " + path,
                                     [path](agent::AgentClient& c, const Sink& sink) {
                                         return agent::files::read_file(c, path, sink);
                                     });
        });
}

Response GuestRoutes::put_file(const Request& request, const PathParams& params) const {
    auto query = query_params(request, {"path", "mode"});
    if (!query) {
        return Response::error(query.error(), request.request_id);
    }
    auto path = path_param(*query);
    if (!path) {
        return Response::error(path.error(), request.request_id);
    }
    agent::files::WriteOptions options;
    if (auto mode = query->find("mode"); mode != query->end()) {
        std::uint32_t value = 0;
        const std::string& text = mode->second;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 8);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value > 07777) {
            return Response::error(api::invalid_argument("mode must be octal permission bits (0644)"),
                                   request.request_id);
        }
        options.mode = value;
    }
    auto client = connect_to_change(params.at("id"));
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    std::optional<Error> body_error;
    auto source = body_source(*request.body_stream, body_error);
    auto written = agent::files::write_file(**client, *path, source, options);
    if (!written) {
        return Response::error(body_error ? *body_error : guest_error(written.error()), request.request_id);
    }
    return Response::ok({{"bytes", *written}}, request.request_id);
}

Response GuestRoutes::stat_file(const Request& request, const PathParams& params) const {
    return read_path(
        request, params, &GuestRoutes::disk_stat, [&](const auto& client, const std::string& path) {
            auto info = agent::files::stat(*client, path);
            if (!info) {
                return Response::error(guest_error(info.error()), request.request_id);
            }
            json stat = {{"path", path},       {"type", kind_name(info->kind)}, {"size", info->size},
                         {"mode", info->mode}, {"mtime", info->mtime},          {"uid", info->uid},
                         {"gid", info->gid}};
            if (info->kind == "symlink") {
                stat["target"] = info->target;
            }
            return Response::ok({{"stat", stat}}, request.request_id);
        });
}

Response GuestRoutes::list_files(const Request& request, const PathParams& params) const {
    return read_path(request, params, &GuestRoutes::disk_list,
                     [&](const auto& client, const std::string& path) {
                         auto entries = agent::files::list(*client, path);
                         if (!entries) {
                             return Response::error(guest_error(entries.error()), request.request_id);
                         }
                         json list = json::array();
                         for (const auto& e : *entries) {
                             list.push_back({{"name", e.name},
                                             {"type", kind_name(e.kind)},
                                             {"size", e.size},
                                             {"mode", e.mode},
                                             {"mtime", e.mtime}});
                         }
                         return Response::ok({{"entries", list}}, request.request_id);
                     });
}

Response GuestRoutes::make_dir(const Request& request, const PathParams& params) const {
    auto body = api::parse_body(request.body);
    if (!body) {
        return Response::error(body.error(), request.request_id);
    }
    api::Fields fields(*body);
    auto path = fields.string("path");
    auto parents = fields.boolean("parents");
    auto mode = fields.integer("mode", 0, 07777);
    for (const Error* error : {path ? nullptr : &path.error(), parents ? nullptr : &parents.error(),
                               mode ? nullptr : &mode.error()}) {
        if (error) {
            return Response::error(*error, request.request_id);
        }
    }
    if (auto r = fields.finish(); !r) {
        return Response::error(r.error(), request.request_id);
    }
    if (!*path || path->value().empty() || path->value().front() != '/') {
        return Response::error(api::invalid_argument("path must be an absolute guest path"),
                               request.request_id);
    }
    auto client = connect_to_change(params.at("id"));
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    agent::files::MkdirOptions options;
    options.parents = parents->value_or(true);
    options.mode = static_cast<std::uint32_t>(mode->value_or(0755));
    if (auto made = agent::files::make_dir(**client, **path, options); !made) {
        return Response::error(guest_error(made.error()), request.request_id);
    }
    return Response::ok(json::object(), request.request_id);
}

Response GuestRoutes::remove_file(const Request& request, const PathParams& params) const {
    auto query = query_params(request, {"path", "recursive"});
    if (!query) {
        return Response::error(query.error(), request.request_id);
    }
    auto path = path_param(*query);
    auto recursive = flag_param(*query, "recursive");
    if (!path || !recursive) {
        return Response::error(!path ? path.error() : recursive.error(), request.request_id);
    }
    auto client = connect_to_change(params.at("id"));
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    if (auto removed = agent::files::remove(**client, *path, *recursive); !removed) {
        return Response::error(guest_error(removed.error()), request.request_id);
    }
    return Response::ok(json::object(), request.request_id);
}

Response GuestRoutes::download_tar(const Request& request, const PathParams& params) const {
    return read_path(
        request, params, &GuestRoutes::disk_get_tar, [&](const auto& client, const std::string& path) {
            // Looked at first, as for a download: a missing path or a device
            // is an error status rather than a cut stream.
            auto info = agent::files::stat(*client, path, true);
            if (!info) {
                return Response::error(guest_error(info.error()), request.request_id);
            }
            if (info->kind != "file" && info->kind != "dir") {
                return Response::error(
                    api::invalid_argument(
                        fmt::format("{} is a {}, not a directory or a regular file", path, info->kind)),
                    request.request_id);
            }
            // No cap: the response's back-pressure bounds what sbxd holds, and
            // the client decides how much it wants.
            return stream_from_agent(client, "application/x-tar", "tar of " + path,
                                     [path](agent::AgentClient& c, const Sink& sink) {
                                         return agent::files::get_tar(
                                             c, path, sink, std::numeric_limits<std::uint64_t>::max());
                                     });
        });
}

Response GuestRoutes::upload_tar(const Request& request, const PathParams& params) const {
    auto path = only_path(request);
    if (!path) {
        return Response::error(path.error(), request.request_id);
    }
    auto client = connect_to_change(params.at("id"));
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    std::optional<Error> body_error;
    auto source = body_source(*request.body_stream, body_error);
    // The agent makes the directory (with its parents) and extracts as the
    // archive arrives; a refused entry ends it, the ones before it stay.
    auto put = agent::files::put_tar(**client, *path, source);
    if (!put) {
        return Response::error(body_error ? *body_error : guest_error(put.error()), request.request_id);
    }
    return Response::ok({{"bytes", put->bytes}, {"entries", put->entries}, {"skipped", put->skipped}},
                        request.request_id);
}

}  // namespace sbx::sbxd

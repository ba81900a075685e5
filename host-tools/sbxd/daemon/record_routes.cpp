// The routes that read and remove what the store records besides
// sandboxes: a sandbox's exec history, named snapshots and the events feed
// (docs/api.md, "History", "Snapshots", "Events").
#include <charconv>

#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/views.hpp"

namespace sbx::sbxd {

using http::Request;
using http::Response;

Response ApiService::history(const Request& request, const PathParams& params) const {
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    auto execs = store_.list_execs(sandbox->id);
    if (!execs) {
        return Response::error(execs.error(), request.request_id);
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : *execs) {
        list.push_back(exec_json(e));
    }
    return Response::ok({{"history", list}}, request.request_id);
}

Response ApiService::list_snapshots(const Request& request, const PathParams&) const {
    auto snapshots = store_.list_snapshots();
    if (!snapshots) {
        return Response::error(snapshots.error(), request.request_id);
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& s : *snapshots) {
        list.push_back(snapshot_json(s));
    }
    return Response::ok({{"snapshots", list}}, request.request_id);
}

Response ApiService::get_snapshot(const Request& request, const PathParams& params) const {
    auto snapshot = store_.get_snapshot(params.at("name"));
    if (!snapshot) {
        return Response::error(snapshot.error(), request.request_id);
    }
    return Response::ok({{"snapshot", snapshot_json(*snapshot)}}, request.request_id);
}

Response ApiService::delete_snapshot(const Request& request, const PathParams& params) const {
    const std::string& name = params.at("name");
    if (auto found = store_.get_snapshot(name); !found) {
        return Response::error(found.error(), request.request_id);
    }
    if (auto removed = driver_.remove_snapshot(name); !removed) {
        return Response::error(removed.error(), request.request_id);
    }
    return Response::ok({{"deleted", nlohmann::json::array({name})}}, request.request_id);
}

Response ApiService::list_events(const Request& request, const PathParams&) const {
    std::int64_t after = 0;
    std::string after_text(request.query_value("after"));
    for (const auto& [key, value] : request.query) {
        if (key != "after") {
            return Response::error(
                api::invalid_argument(fmt::format("unknown query parameter '{}' (after)", key)),
                request.request_id);
        }
    }
    if (!after_text.empty()) {
        auto [end, ec] = std::from_chars(after_text.data(), after_text.data() + after_text.size(), after);
        if (ec != std::errc() || end != after_text.data() + after_text.size() || after < 0) {
            return Response::error(api::invalid_argument("after must be an event id"), request.request_id);
        }
    }
    auto events = store_.list_events(after, 1000);
    if (!events) {
        return Response::error(events.error(), request.request_id);
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : *events) {
        list.push_back(event_json(e));
    }
    return Response::ok({{"events", list}}, request.request_id);
}

}  // namespace sbx::sbxd

// API keys through the API (docs/api.md, "API keys"): make one, list
// them, revoke one. host_route() admits only host-wide callers, and the
// read-only rule only lets a read-only key list, so a sandbox's own key
// (SANDBOXER_TOKEN) can neither make a key nor see any. `sbxd keys` does
// the same on the host without a running sbxd.
#include "host-tools/sbxd/api/requests.hpp"
#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/views.hpp"

namespace sbx::sbxd {

using http::Request;
using http::Response;

Response ApiService::create_key(const Request& request, const PathParams&) const {
    auto parsed = api::parse_key_create(request.body);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    // A key for a sandbox that is not there would never work.
    if (parsed->sandbox_id) {
        if (auto sandbox = store_.get_sandbox(*parsed->sandbox_id); !sandbox) {
            return Response::error(sandbox.error(), request.request_id);
        }
    }
    const UnixMillis now = clock_();
    KeyLimits limits{parsed->read_only, std::nullopt};
    if (parsed->expires_in_seconds) {
        limits.expires_at = now + *parsed->expires_in_seconds * 1000;
    }
    auto key = make_api_key(parsed->name, parsed->sandbox_id, now, limits);
    if (!key) {
        return Response::error(key.error().with_code(api::code::kInternal), request.request_id);
    }
    if (auto added = store_.add_api_key(key->record); !added) {
        return Response::error(added.error(), request.request_id);
    }
    // The secret is in this reply only: the store keeps its hash.
    return Response::ok({{"key", api_key_json(key->record)}, {"secret", key->secret}}, request.request_id, 201);
}

Response ApiService::list_keys(const Request& request, const PathParams&) const {
    auto keys = store_.list_api_keys();
    if (!keys) {
        return Response::error(keys.error(), request.request_id);
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& key : *keys) {
        list.push_back(api_key_json(key));
    }
    return Response::ok({{"keys", list}}, request.request_id);
}

Response ApiService::delete_key(const Request& request, const PathParams& params) const {
    const std::string& id = params.at("id");
    if (auto removed = store_.remove_api_key(id); !removed) {
        return Response::error(removed.error(), request.request_id);
    }
    return Response::ok({{"deleted", id}}, request.request_id);
}

}  // namespace sbx::sbxd

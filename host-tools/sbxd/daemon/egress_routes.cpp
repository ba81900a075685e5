// POST /v1/sandboxes/{id}/egress (docs/api.md, "Egress"): a sandbox's new
// egress policy, kept in the store and put into the host's egress table at
// once when the sandbox has a tap (docs/network.md, "Per-sandbox egress").
// Registered as a host route: a key scoped to the sandbox cannot change it.
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"

namespace sbx::sbxd {

http::Response ApiService::egress_sandbox(const http::Request& request, const PathParams& params) const {
    auto parsed = api::parse_egress_request(request.body);
    if (!parsed) {
        return http::Response::error(parsed.error(), request.request_id);
    }
    return change_settings(request, params.at("id"), [&](const SandboxRecord& sandbox) -> Result<void> {
        SandboxRecord changed = sandbox;
        changed.egress = net::format_egress(parsed->egress);
        if (auto set = store_.set_egress(sandbox.id, changed.egress, clock_()); !set) {
            return set;
        }
        return driver_.apply_egress(changed);
    });
}

}  // namespace sbx::sbxd

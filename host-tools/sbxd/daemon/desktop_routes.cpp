// The desktop (docs/api.md, "The desktop"): the agent's X server, VNC
// server and XFCE session started and asked after, computer-use actions
// and screenshots, and the private links at which sbxd's proxy shows the
// screen in a browser (desktop_viewer.hpp). Each call reaches the agent
// as any guest request does: a paused sandbox wakes, the call holds an
// activity lease.
#include <utility>

#include "guest-agent/desktop/desktop_client.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/desktop_requests.hpp"

namespace sbx::sbxd {

namespace {

using http::Request;
using http::Response;

// A desktop's new links: a subdomain and a token for each (the store keeps
// the ones a desktop has already).
Result<DesktopRecord> new_links(const std::string& sandbox_id, UnixMillis now) {
    auto subdomain = random_hex(5);
    auto token = random_hex(16);
    auto view_token = random_hex(16);
    for (const auto* r : {&subdomain, &token, &view_token}) {
        if (!*r) {
            return r->error();
        }
    }
    DesktopRecord record;
    record.sandbox_id = sandbox_id;
    record.subdomain = std::move(*subdomain);
    record.token = std::move(*token);
    record.view_token = std::move(*view_token);
    record.created_at = now;
    return record;
}

// `op` on a new connection to the sandbox's agent (waking it, leased while
// it runs); the agent's error as the API's (desktop_error).
template <typename Op>
auto on_agent(const GuestRoutes& guest, const std::string& id, const Op& op)
    -> decltype(op(std::declval<agent::AgentClient&>())) {
    auto client = guest.connect(id);
    if (!client) {
        return client.error();
    }
    auto result = op(**client);
    if (!result) {
        return desktop_error(result.error());
    }
    return result;
}

}  // namespace

nlohmann::json ApiService::desktop_view(const agent::DesktopInfo& info, const std::optional<DesktopRecord>& desktop,
                                        const Request& request) const {
    nlohmann::json view = {
        {"running", info.running},      {"sessionRunning", info.session_running},
        {"display", nullptr},           {"width", nullptr},
        {"height", nullptr},            {"vncPort", nullptr},
        {"url", nullptr},               {"viewOnlyUrl", nullptr},
    };
    if (info.running) {
        view["display"] = info.display;
        view["width"] = info.width;
        view["height"] = info.height;
        view["vncPort"] = info.vnc_port;
    }
    if (desktop && info_.proxy) {
        // A read-only key sees the screen but gets no link that takes input.
        if (!request.principal.read_only) {
            view["url"] = desktop_url(info_.proxy->domain, info_.proxy->url_port, *desktop, false);
        }
        view["viewOnlyUrl"] = desktop_url(info_.proxy->domain, info_.proxy->url_port, *desktop, true);
    }
    return view;
}

Response ApiService::start_desktop(const Request& request, const PathParams& params) const {
    auto body = parse_desktop_start(request.body);
    if (!body) {
        return Response::error(body.error(), request.request_id);
    }
    const std::string& id = params.at("id");
    const auto options = desktop_start_options(*body);
    auto info = on_agent(guest_, id, [&](agent::AgentClient& client) { return agent::desktop_start(client, options); });
    if (!info) {
        return Response::error(info.error(), request.request_id);
    }
    auto links = new_links(id, clock_());
    if (!links) {
        return Response::error(links.error(), request.request_id);
    }
    links->display = static_cast<int>(info->display);
    links->vnc_port = info->vnc_port;
    links->width = static_cast<int>(info->width);
    links->height = static_cast<int>(info->height);
    auto stored = store_.set_desktop(*links);
    if (!stored) {
        return Response::error(stored.error(), request.request_id);
    }
    auto view = desktop_view(*info, *stored, request);
    view["started"] = info->started;
    nlohmann::json fields = {{"desktop", view}, {"warnings", nlohmann::json::array()}};
    if (!info_.proxy) {
        fields["warnings"].push_back("this sbxd serves no desktop links (started with --proxy-listen off)");
    }
    return Response::ok(fields, request.request_id);
}

Response ApiService::get_desktop(const Request& request, const PathParams& params) const {
    const std::string& id = params.at("id");
    auto info = on_agent(guest_, id, [](agent::AgentClient& client) { return agent::desktop_status(client); });
    if (!info) {
        return Response::error(info.error(), request.request_id);
    }
    auto desktop = store_.get_desktop(id);
    if (!desktop) {
        return Response::error(desktop.error(), request.request_id);
    }
    return Response::ok({{"desktop", desktop_view(*info, *desktop, request)}}, request.request_id);
}

Response ApiService::desktop_action(const Request& request, const PathParams& params) const {
    auto action = parse_desktop_action(request.body);
    if (!action) {
        return Response::error(action.error(), request.request_id);
    }
    auto result = on_agent(guest_, params.at("id"),
                           [&](agent::AgentClient& client) { return agent::desktop_action(client, *action); });
    if (!result) {
        return Response::error(result.error(), request.request_id);
    }
    return Response::ok({{"action", (*action)["action"]}, {"result", std::move(*result)}}, request.request_id);
}

Response ApiService::desktop_screenshot(const Request& request, const PathParams& params) const {
    auto query = query_params(request, {"maxWidth"});
    if (!query) {
        return Response::error(query.error(), request.request_id);
    }
    auto max_width = query->find("maxWidth");
    auto action = screenshot_action(max_width == query->end() ? std::string_view() : max_width->second);
    if (!action) {
        return Response::error(action.error(), request.request_id);
    }
    auto image = on_agent(guest_, params.at("id"),
                          [&](agent::AgentClient& client) { return agent::desktop_image(client, *action); });
    if (!image) {
        return Response::error(image.error(), request.request_id);
    }
    Response response;
    response.body = std::move(image->png);
    response.headers = {{"Content-Type", "image/png"},
                        {"Cache-Control", "no-store"},
                        {"X-Image-Width", std::to_string(image->width)},
                        {"X-Image-Height", std::to_string(image->height)}};
    return response;
}

}  // namespace sbx::sbxd

// The desktop's requests and links apart from any socket (docs/api.md,
// "The desktop"): the bodies of POST .../desktop and .../desktop/actions,
// the agent's desktop errors as the API's, and the private URLs sbxd's
// proxy serves the viewer at.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "guest-agent/desktop/desktop_client.hpp"
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

// The proxy's service words (proxy.hpp, ProxyConfig::services):
// https://<subdomain>-desktop.<domain> takes input, -view does not.
inline constexpr std::string_view kDesktopService = "desktop";
inline constexpr std::string_view kViewService = "view";

// POST /v1/sandboxes/{id}/desktop: {"display"?: 0-99, "width"?, "height"?:
// 64-8192}, all optional (the agent's defaults: :1, 1280 × 800).
struct DesktopStartBody {
    std::optional<std::uint32_t> display, width, height;
};
[[nodiscard]] Result<DesktopStartBody> parse_desktop_start(std::string_view body);
// The agent's options for a body, or for starting a desktop again as it was.
[[nodiscard]] agent::DesktopStartOptions desktop_start_options(const DesktopStartBody& body);
[[nodiscard]] agent::DesktopStartOptions desktop_start_options(const DesktopRecord& desktop);

// The computer-use actions (Anthropic's computer-use tool), by name.
[[nodiscard]] bool is_desktop_action(std::string_view name);
// POST .../desktop/actions: a JSON object whose "action" is one of them;
// its other fields are the agent's to check. Codes bad_request (not a
// JSON object), invalid_argument.
[[nodiscard]] Result<nlohmann::json> parse_desktop_action(std::string_view body);
// GET .../desktop/screenshot?maxWidth=N (1-8192; optional).
[[nodiscard]] Result<nlohmann::json> screenshot_action(std::string_view max_width);

// An error of the agent's desktop ops as the API's: not_installed (an
// image without the desktop) and not_running (no desktop started) 409
// invalid_state, bad_request and not_found (no such guest user) 400
// invalid_argument, start_failed and action_failed 502
// agent_unavailable; the rest as for any guest request.
[[nodiscard]] Error desktop_error(const Error& error);

// https://<subdomain>-desktop.<domain>[:port]/vnc.html?<viewer_query>&_token=<token>
// (-view and its own token for `view_only`).
[[nodiscard]] std::string desktop_url(std::string_view domain, std::uint16_t url_port,
                                      const DesktopRecord& desktop, bool view_only);

}  // namespace sbx::sbxd

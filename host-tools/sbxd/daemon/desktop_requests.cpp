#include "host-tools/sbxd/daemon/desktop_requests.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/daemon/desktop_viewer.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"

namespace sbx::sbxd {

namespace {

// The actions of Anthropic's computer-use tool (computer_20250124, and
// zoom from computer_20251124), as the agent's desktop_action takes them.
constexpr std::array<std::string_view, 17> kActions{
    "screenshot",   "mouse_move",      "left_click",      "right_click",   "middle_click", "double_click",
    "triple_click", "left_click_drag", "left_mouse_down", "left_mouse_up", "scroll",       "type",
    "key",          "hold_key",        "cursor_position", "wait",          "zoom"};

// The fields an action may have (docs/agent-protocol.md, "Desktop"); the
// agent checks which action takes which, and coordinates against the screen.
constexpr std::array<std::string_view, 10> kActionFields{
    "action",        "coordinate", "start_coordinate", "region",    "text", "scroll_direction",
    "scroll_amount", "duration",   "max_width",        "max_height"};

constexpr unsigned kMaxSide = 8192;

// A field that is absent (or null), or an array of `count` integers.
Result<void> integer_array(const nlohmann::json& body, nlohmann::json::const_iterator field, std::string_view name,
                           std::size_t count) {
    if (field == body.end() || field->is_null()) {
        return ok();
    }
    if (!field->is_array() || field->size() != count ||
        !std::all_of(field->begin(), field->end(), [](const nlohmann::json& v) { return v.is_number_integer(); })) {
        return api::invalid_argument(fmt::format("{} must be an array of {} integers", name, count));
    }
    return ok();
}

}  // namespace

Result<DesktopStartBody> parse_desktop_start(std::string_view body) {
    auto json = api::parse_body(body);
    if (!json) {
        return json.error();
    }
    api::Fields fields(*json);
    // The agent's bounds (docs/agent-protocol.md, "Desktop").
    auto display = fields.integer("display", 0, 99);
    auto width = fields.integer("width", 64, 8192);
    auto height = fields.integer("height", 64, 8192);
    for (const auto* field : {&display, &width, &height}) {
        if (!*field) {
            return field->error();
        }
    }
    if (auto r = fields.finish(); !r) {
        return r.error();
    }
    auto narrow = [](const std::optional<std::int64_t>& v) {
        return v ? std::optional<std::uint32_t>(static_cast<std::uint32_t>(*v)) : std::nullopt;
    };
    return DesktopStartBody{narrow(*display), narrow(*width), narrow(*height)};
}

agent::DesktopStartOptions desktop_start_options(const DesktopStartBody& body) {
    agent::DesktopStartOptions options;
    options.display = body.display.value_or(options.display);
    options.width = body.width.value_or(options.width);
    options.height = body.height.value_or(options.height);
    return options;
}

agent::DesktopStartOptions desktop_start_options(const DesktopRecord& desktop) {
    agent::DesktopStartOptions options;
    options.display = static_cast<std::uint32_t>(desktop.display);
    if (desktop.width > 0 && desktop.height > 0) {
        options.width = static_cast<std::uint32_t>(desktop.width);
        options.height = static_cast<std::uint32_t>(desktop.height);
    }
    return options;
}

bool is_desktop_action(std::string_view name) {
    return std::find(kActions.begin(), kActions.end(), name) != kActions.end();
}

Result<nlohmann::json> parse_desktop_action(std::string_view body) {
    auto json = api::parse_body(body);
    if (!json) {
        return json.error();
    }
    for (const auto& [name, value] : json->items()) {
        if (std::find(kActionFields.begin(), kActionFields.end(), name) == kActionFields.end()) {
            return api::invalid_argument(fmt::format("unknown field '{}'", name));
        }
    }
    api::Fields fields(*json);
    auto action = fields.string("action");
    auto text = fields.string("text");
    auto direction = fields.string("scroll_direction");
    auto amount = fields.integer("scroll_amount", 1, 100);
    auto max_width = fields.integer("max_width", 1, 8192);
    auto max_height = fields.integer("max_height", 1, 8192);
    std::optional<Error> bad;
    auto note = [&bad](const auto& r) {
        if (!r && !bad) {
            bad = r.error();
        }
    };
    note(action);
    note(text);
    note(direction);
    note(amount);
    note(max_width);
    note(max_height);
    note(integer_array(*json, json->find("coordinate"), "coordinate", 2));
    note(integer_array(*json, json->find("start_coordinate"), "start_coordinate", 2));
    note(integer_array(*json, json->find("region"), "region", 4));
    if (bad) {
        return *bad;
    }
    if (auto duration = json->find("duration");
        duration != json->end() && !duration->is_null() &&
        (!duration->is_number() || duration->get<double>() < 0 || duration->get<double>() > 100)) {
        return api::invalid_argument("duration must be a number of seconds, 0 to 100");
    }
    if (!*action) {
        return api::invalid_argument("action is required: a computer-use action's name, e.g. \"screenshot\"");
    }
    if (!is_desktop_action(**action)) {
        return api::invalid_argument(fmt::format("action '{}' is not a computer-use action", **action));
    }
    return std::move(*json);
}

Result<nlohmann::json> screenshot_action(std::string_view max_width) {
    nlohmann::json action = {{"action", "screenshot"}};
    if (max_width.empty()) {
        return action;
    }
    unsigned value = 0;
    auto [end, ec] = std::from_chars(max_width.data(), max_width.data() + max_width.size(), value);
    if (ec != std::errc() || end != max_width.data() + max_width.size() || value < 1 || value > kMaxSide) {
        return api::invalid_argument("maxWidth must be a number 1..8192");
    }
    action["max_width"] = value;
    return action;
}

Error desktop_error(const Error& error) {
    const std::string_view code = agent::error_code(error);
    auto as = [&](std::string_view api_code) { return Error{error.to_string(), 0, std::string(api_code)}; };
    if (code == "not_installed" || code == "not_running") {
        return as(api::code::kInvalidState);
    }
    if (code == "not_found" || code == "bad_request") {
        return as(api::code::kInvalidArgument);
    }
    if (code == "start_failed" || code == "action_failed") {
        return as(api::code::kAgentUnavailable);
    }
    return guest_error(error);
}

std::string desktop_url(std::string_view domain, std::uint16_t url_port, const DesktopRecord& desktop,
                        bool view_only) {
    std::string url = fmt::format("https://{}-{}.{}", desktop.subdomain, view_only ? kViewService : kDesktopService,
                                  domain);
    if (url_port != 443) {
        url += fmt::format(":{}", url_port);
    }
    return fmt::format("{}{}?{}&_token={}", url, kViewerPage, viewer_query(view_only),
                       view_only ? desktop.view_token : desktop.token);
}

}  // namespace sbx::sbxd

#include "guest-agent/desktop/desktop_client.hpp"

#include "base/base64.hpp"
#include "guest-agent/desktop/desktop_request.hpp"
#include "guest-agent/files/client_transfer.hpp"

namespace sbx::agent {
namespace {

// The agent's own time for a start (its wait for the X server) or an
// action (a wait, a held key, typing), on top of the reply timeout.
constexpr std::chrono::milliseconds kStartTime{60'000};
constexpr std::chrono::milliseconds kTypePerByte{20};

std::optional<Clock::time_point> later(AgentClient& client, std::chrono::milliseconds extra) {
    auto deadline = client.reply_deadline();
    return deadline ? std::optional(*deadline + extra) : std::nullopt;
}

std::chrono::milliseconds action_time(const Json& action) {
    std::chrono::milliseconds extra{0};
    if (auto d = action.find("duration"); d != action.end() && d->is_number()) {
        extra += std::chrono::milliseconds(static_cast<std::int64_t>(std::clamp(d->get<double>(), 0.0, 1e6) * 1000));
    }
    if (auto t = action.find("text"); t != action.end() && t->is_string()) {
        extra += kTypePerByte * static_cast<std::int64_t>(t->get_ref<const std::string&>().size());
    }
    return extra;
}

Result<Json> result_of(AgentClient& client, std::string_view op, Json fields, std::chrono::milliseconds extra) {
    if (auto r = client.send_request(op, std::move(fields)); !r) {
        return r.error();
    }
    return client.expect(client.read_reply(later(client, extra)), "result");
}

Result<std::uint32_t> dimension(AgentClient& client, const Json& reply, std::string_view key, std::uint64_t max) {
    auto v = reply_u64(reply, key, max);
    if (!v) {
        return client.abandon(v.error());
    }
    return static_cast<std::uint32_t>(*v);
}

Result<DesktopInfo> parse_info(AgentClient& client, const Json& reply, bool from_start) {
    DesktopInfo info;
    info.raw = reply;
    auto running = from_start ? Result<std::optional<bool>>(std::optional(true)) : reply_optional_bool(reply, "running");
    auto started = from_start ? reply_optional_bool(reply, "started") : Result<std::optional<bool>>(std::nullopt);
    auto session = reply_optional_bool(reply, "session_running");
    auto display = reply_optional_u64(reply, "display", kMaxDisplay);
    auto port = reply_optional_u64(reply, "vnc_port", 65535);
    auto width = reply_optional_u64(reply, "width", kMaxScreenSide);
    auto height = reply_optional_u64(reply, "height", kMaxScreenSide);
    for (const Error* e : {running ? nullptr : &running.error(), started ? nullptr : &started.error(),
                           session ? nullptr : &session.error(), display ? nullptr : &display.error(),
                           port ? nullptr : &port.error(), width ? nullptr : &width.error(),
                           height ? nullptr : &height.error()}) {
        if (e != nullptr) {
            return client.abandon(*e);
        }
    }
    if (!*running) {
        return client.abandon(malformed_reply("desktop_status without \"running\""));
    }
    info.running = **running;
    info.started = started->value_or(false);
    info.session_running = session->value_or(false);
    if (info.running) {
        if (!*display || !*width || !*height) {
            return client.abandon(malformed_reply("a running desktop without its display and size"));
        }
        info.display = static_cast<std::uint32_t>(**display);
        info.vnc_port = static_cast<std::uint16_t>(port->value_or(0));
        info.width = static_cast<std::uint32_t>(**width);
        info.height = static_cast<std::uint32_t>(**height);
    }
    return info;
}

bool is_image_action(const Json& action) {
    auto a = action.find("action");
    return a != action.end() && a->is_string() && (*a == "screenshot" || *a == "zoom");
}

}  // namespace

Result<DesktopInfo> desktop_start(AgentClient& client, const DesktopStartOptions& options) {
    auto reply = result_of(client, "desktop_start",
                           Json{{"display", options.display},
                                {"width", options.width},
                                {"height", options.height},
                                {"user", options.user}},
                           kStartTime);
    if (!reply) {
        return reply.error();
    }
    return parse_info(client, *reply, true);
}

Result<DesktopInfo> desktop_status(AgentClient& client) {
    auto reply = result_of(client, "desktop_status", Json::object(), std::chrono::milliseconds(0));
    if (!reply) {
        return reply.error();
    }
    return parse_info(client, *reply, false);
}

Result<DesktopImage> desktop_image(AgentClient& client, const Json& action, std::uint64_t max_png_bytes) {
    if (!action.is_object() || !is_image_action(action)) {
        return make_coded_error(code::kBadRequest, "desktop_image takes a screenshot or zoom action");
    }
    Json fields = action;
    if (auto r = client.send_request("desktop_action", std::move(fields)); !r) {
        return r.error();
    }
    DesktopImage image;
    std::uint64_t received = 0;
    const std::uint64_t cap = std::min<std::uint64_t>(max_png_bytes, kMaxDesktopPng);
    auto reply = files::detail::receive_download(
        client, "a desktop image",
        [&](std::span<const std::uint8_t> bytes) {
            image.png.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
            return ok();
        },
        std::nullopt, cap, received);
    if (!reply) {
        return reply.error();
    }
    auto width = dimension(client, *reply, "width", kMaxScreenSide);
    auto height = dimension(client, *reply, "height", kMaxScreenSide);
    if (!width || !height) {
        return (!width ? width : height).error();
    }
    auto size = png_size(image.png);
    if (!size || size->width != *width || size->height != *height) {
        return client.abandon(malformed_reply("the desktop image is not a PNG of the size the reply gives"));
    }
    image.width = *width;
    image.height = *height;
    return image;
}

Result<Json> desktop_action(AgentClient& client, const Json& action, std::uint64_t max_png_bytes) {
    if (!action.is_object()) {
        return make_coded_error(code::kBadRequest, "an action is a JSON object");
    }
    if (is_image_action(action)) {
        auto image = desktop_image(client, action, max_png_bytes);
        if (!image) {
            return image.error();
        }
        return Json{{"png", base64_encode(image->png)}, {"width", image->width}, {"height", image->height}};
    }
    auto reply = result_of(client, "desktop_action", action, action_time(action));
    if (!reply) {
        return reply.error();
    }
    Json out = Json::object();
    if (reply->contains("x") || reply->contains("y")) {
        auto x = reply_u64(*reply, "x", kMaxScreenSide);
        auto y = reply_u64(*reply, "y", kMaxScreenSide);
        if (!x || !y) {
            return client.abandon((!x ? x : y).error());
        }
        out["x"] = *x;
        out["y"] = *y;
    }
    auto err = reply_optional_string(*reply, "stderr");
    if (!err) {
        return client.abandon(err.error());
    }
    if (*err) {
        out["stderr"] = printable(**err);
    }
    return out;
}

}  // namespace sbx::agent

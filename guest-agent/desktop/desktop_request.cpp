#include "guest-agent/desktop/desktop_request.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <iterator>

namespace sbx::agent {
namespace {

// Anthropic's computer-use reference implementation: 12 ms between
// keystrokes, and 10 ms between the clicks of a double or triple click.
constexpr int kTypingDelayMs = 12;
constexpr int kRepeatDelayMs = 10;
constexpr std::size_t kMaxTypeBytes = 4096;
constexpr std::size_t kMaxKeyBytes = 1024;
constexpr std::size_t kMaxKeyCombos = 64;
constexpr std::int64_t kMaxScrollAmount = 100;
constexpr double kMaxDurationS = 100;  // the reference implementation's bound on wait and hold_key
constexpr std::chrono::milliseconds kRunDeadline{10'000};
constexpr std::chrono::milliseconds kCaptureDeadline{30'000};
constexpr std::chrono::milliseconds kTypePerByte{20};

// Every field some action takes: each action refuses the others.
constexpr std::string_view kActionFields[] = {
    "coordinate", "start_coordinate", "text", "scroll_direction", "scroll_amount",
    "duration",   "region",           "max_width", "max_height"};

// xdotool 3.20160805's commands (xdotool(1), COMMANDS): `key`, `keydown`
// and `keyup` take arguments up to the next command name, matched without
// regard to case, which then runs as the next command of the chain —
// `exec` (or `EXEC`) would run a program. (So the keysym `Help` is out.)
constexpr std::string_view kXdotoolCommands[] = {
    "behave", "behave_screen_edge", "click", "exec", "get_desktop", "get_desktop_for_window",
    "get_desktop_viewport", "get_num_desktops", "getactivewindow", "getdisplaygeometry", "getmouselocation",
    "getwindowfocus", "getwindowgeometry", "getwindowname", "getwindowpid", "help", "key", "keydown", "keyup",
    "mousedown", "mousemove", "mousemove_relative", "mouseup", "search", "selectwindow", "set_desktop",
    "set_desktop_for_window", "set_desktop_viewport", "set_num_desktops", "set_window", "sleep", "type",
    "version", "windowactivate", "windowclose", "windowfocus", "windowkill", "windowmap", "windowminimize",
    "windowmove", "windowraise", "windowreparent", "windowsize", "windowunmap", "windowstate", "getwindowclassname",
    "get_display"};

template <typename... Args>
Error bad(fmt::format_string<Args...> format, Args&&... args) {
    return make_coded_error(code::kBadRequest, format, std::forward<Args>(args)...);
}

bool present(const Json& request, std::string_view key) {
    auto it = request.find(key);
    return it != request.end() && !it->is_null();
}

Result<void> only_fields(const Json& request, std::string_view action, std::initializer_list<std::string_view> taken) {
    for (std::string_view field : kActionFields) {
        if (present(request, field) && std::find(taken.begin(), taken.end(), field) == taken.end()) {
            return bad("\"{}\" is not accepted by {}", field, action);
        }
    }
    return ok();
}

struct Point {
    std::uint32_t x = 0;
    std::uint32_t y = 0;
};

Result<Point> point(const Json& request, std::string_view key, ScreenSize screen) {
    if (!present(request, key)) {
        return bad("\"{}\" is required", key);
    }
    const Json& v = request[std::string(key)];
    if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer()) {
        return bad("\"{}\" must be [x, y], two integers", key);
    }
    const auto x = v[0].get<std::int64_t>();
    const auto y = v[1].get<std::int64_t>();
    if (x < 0 || y < 0 || x >= screen.width || y >= screen.height) {
        return bad("\"{}\" [{}, {}] is off the {}x{} screen", key, x, y, screen.width, screen.height);
    }
    return Point{static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(y)};
}

Result<std::optional<Point>> optional_point(const Json& request, std::string_view key, ScreenSize screen) {
    if (!present(request, key)) {
        return std::optional<Point>();
    }
    auto p = point(request, key, screen);
    if (!p) {
        return p.error();
    }
    return std::optional<Point>(*p);
}

bool keysym_part(std::string_view part) {
    return !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    });
}

// Key combinations separated by spaces, each keysym names joined by '+'.
Result<std::vector<std::string>> key_combos(const Json& request, std::string_view action) {
    if (!present(request, "text")) {
        return bad("\"text\" (the keys) is required by {}", action);
    }
    if (!request["text"].is_string()) {
        return bad("\"text\" must be a string");
    }
    const auto& text = request["text"].get_ref<const std::string&>();
    if (text.size() > kMaxKeyBytes) {
        return bad("\"text\" is over {} bytes", kMaxKeyBytes);
    }
    std::vector<std::string> combos;
    std::size_t at = 0;
    while (at < text.size()) {
        const std::size_t start = text.find_first_not_of(' ', at);
        if (start == std::string::npos) {
            break;
        }
        const std::size_t end = std::min(text.find(' ', start), text.size());
        std::string_view combo = std::string_view(text).substr(start, end - start);
        at = end;
        for (std::size_t p = 0; p <= combo.size();) {
            const std::size_t plus = std::min(combo.find('+', p), combo.size());
            if (!keysym_part(combo.substr(p, plus - p))) {
                return bad("\"text\": \"{}\" is not keysym names (letters, digits, '_') joined by '+'", combo);
            }
            p = plus + 1;
        }
        std::string lower(combo);
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
        if (std::find(std::begin(kXdotoolCommands), std::end(kXdotoolCommands), lower) != std::end(kXdotoolCommands)) {
            return bad("\"text\": \"{}\" is an xdotool command, not a key", combo);
        }
        combos.emplace_back(combo);
    }
    if (combos.empty()) {
        return bad("\"text\" names no key");
    }
    if (combos.size() > kMaxKeyCombos) {
        return bad("\"text\" has over {} key combinations", kMaxKeyCombos);
    }
    return combos;
}

Result<std::optional<std::vector<std::string>>> modifiers(const Json& request, std::string_view action) {
    if (!present(request, "text")) {
        return std::optional<std::vector<std::string>>();
    }
    auto combos = key_combos(request, action);
    if (!combos) {
        return combos.error();
    }
    return std::optional<std::vector<std::string>>(std::move(*combos));
}

Result<std::chrono::milliseconds> duration(const Json& request, std::string_view action) {
    if (!present(request, "duration")) {
        return bad("\"duration\" (seconds) is required by {}", action);
    }
    const Json& v = request["duration"];
    if (!v.is_number()) {
        return bad("\"duration\" must be a number of seconds");
    }
    const double seconds = v.get<double>();
    if (!(seconds >= 0 && seconds <= kMaxDurationS)) {
        return bad("\"duration\" must be between 0 and {} seconds", kMaxDurationS);
    }
    return std::chrono::milliseconds(std::llround(seconds * 1000));
}

Result<std::optional<std::uint32_t>> bound(const Json& request, std::string_view key) {
    if (!present(request, key)) {
        return std::optional<std::uint32_t>();
    }
    auto v = get_int(request, key);
    if (!v || *v < 1 || *v > kMaxScreenSide) {
        return bad("\"{}\" must be an integer from 1 to {}", key, kMaxScreenSide);
    }
    return std::optional<std::uint32_t>(static_cast<std::uint32_t>(*v));
}

std::string num(std::int64_t n) {
    return std::to_string(n);
}

void append(std::vector<std::string>& argv, std::initializer_list<std::string> more) {
    argv.insert(argv.end(), more);
}

void move_to(std::vector<std::string>& argv, const std::optional<Point>& p) {
    // No --sync: it waits for the pointer to move, forever when it is there
    // already. xdotool's later events follow on the same X connection, and
    // it exits only after XCloseDisplay's round trip, so the X server has
    // applied the motion before anything else observes the pointer.
    if (p) {
        append(argv, {"mousemove", num(p->x), num(p->y)});
    }
}

// [mousemove X Y] [keydown MODS] <middle> [keyup MODS]
std::vector<std::string> with_modifiers(const std::optional<Point>& p,
                                        const std::optional<std::vector<std::string>>& mods,
                                        const std::vector<std::string>& middle) {
    std::vector<std::string> argv{"xdotool"};
    move_to(argv, p);
    if (mods) {
        argv.emplace_back("keydown");
        argv.insert(argv.end(), mods->begin(), mods->end());
    }
    argv.insert(argv.end(), middle.begin(), middle.end());
    if (mods) {
        argv.emplace_back("keyup");
        argv.insert(argv.end(), mods->rbegin(), mods->rend());
    }
    return argv;
}

std::string seconds_text(std::chrono::milliseconds ms) {
    return fmt::format("{}.{:03}", ms.count() / 1000, ms.count() % 1000);
}

Result<ActionPlan> plan_click(const Json& request, std::string_view action, ScreenSize screen) {
    if (auto r = only_fields(request, action, {"coordinate", "text"}); !r) {
        return r.error();
    }
    auto p = optional_point(request, "coordinate", screen);
    if (!p) {
        return p.error();
    }
    auto mods = modifiers(request, action);
    if (!mods) {
        return mods.error();
    }
    std::vector<std::string> click = {"click", "1"};
    if (action == "right_click") {
        click = {"click", "3"};
    } else if (action == "middle_click") {
        click = {"click", "2"};
    } else if (action == "double_click") {
        click = {"click", "--repeat", "2", "--delay", num(kRepeatDelayMs), "1"};
    } else if (action == "triple_click") {
        click = {"click", "--repeat", "3", "--delay", num(kRepeatDelayMs), "1"};
    }
    return ActionPlan{.argv = with_modifiers(*p, *mods, click), .deadline = kRunDeadline};
}

Result<ActionPlan> plan_scroll(const Json& request, ScreenSize screen) {
    if (auto r = only_fields(request, "scroll", {"coordinate", "text", "scroll_direction", "scroll_amount"}); !r) {
        return r.error();
    }
    auto p = optional_point(request, "coordinate", screen);
    if (!p) {
        return p.error();
    }
    auto mods = modifiers(request, "scroll");
    if (!mods) {
        return mods.error();
    }
    // X's wheel buttons: 4 up, 5 down, 6 left, 7 right.
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kButtons = {
        {{"up", "4"}, {"down", "5"}, {"left", "6"}, {"right", "7"}}};
    auto direction = get_string(request, "scroll_direction", "");
    auto button = std::find_if(kButtons.begin(), kButtons.end(),
                               [&](const auto& b) { return direction && b.first == *direction; });
    if (button == kButtons.end()) {
        return bad("\"scroll_direction\" must be \"up\", \"down\", \"left\" or \"right\"");
    }
    auto amount = get_int(request, "scroll_amount", -1);
    if (!amount || *amount < 1 || *amount > kMaxScrollAmount) {
        return bad("\"scroll_amount\" must be an integer from 1 to {}", kMaxScrollAmount);
    }
    return ActionPlan{.argv = with_modifiers(*p, *mods,
                                             {"click", "--repeat", num(*amount), "--delay", num(kRepeatDelayMs),
                                              std::string(button->second)}),
                      .deadline = kRunDeadline};
}

Result<ActionPlan> plan_capture(const Json& request, std::string_view action, ScreenSize screen,
                                std::uint32_t display) {
    if (action == "zoom") {
        if (auto r = only_fields(request, action, {"region"}); !r) {
            return r.error();
        }
        const Json region = request.value("region", Json());
        if (!region.is_array() || region.size() != 4 ||
            !std::all_of(region.begin(), region.end(), [](const Json& v) { return v.is_number_integer(); })) {
            return bad("\"region\" must be [x0, y0, x1, y1], four integers");
        }
        const auto x0 = region[0].get<std::int64_t>();
        const auto y0 = region[1].get<std::int64_t>();
        const auto x1 = region[2].get<std::int64_t>();
        const auto y1 = region[3].get<std::int64_t>();
        if (x0 < 0 || y0 < 0 || x0 >= x1 || y0 >= y1 || x1 > screen.width || y1 > screen.height) {
            return bad("\"region\" [{}, {}, {}, {}] must have 0 <= x0 < x1 <= {} and 0 <= y0 < y1 <= {}", x0, y0, x1,
                       y1, screen.width, screen.height);
        }
        return ActionPlan{.argv = {"maim", "-f", "png", "-g", fmt::format("{}x{}+{}+{}", x1 - x0, y1 - y0, x0, y0)},
                          .deadline = kCaptureDeadline,
                          .output = ActionPlan::Output::Png};
    }
    if (auto r = only_fields(request, action, {"max_width", "max_height"}); !r) {
        return r.error();
    }
    auto max_width = bound(request, "max_width");
    auto max_height = bound(request, "max_height");
    if (!max_width || !max_height) {
        return (!max_width ? max_width.error() : max_height.error());
    }
    const ScreenSize size = fit_within(screen, *max_width, *max_height);
    if (size == screen) {
        return ActionPlan{.argv = {"maim", "-f", "png"}, .deadline = kCaptureDeadline,
                          .output = ActionPlan::Output::Png};
    }
    // ffmpeg-devices(1) x11grab; ffmpeg-filters(1) scale, "area" averaging for a reduction.
    return ActionPlan{.argv = {"ffmpeg", "-nostdin", "-loglevel", "error", "-f", "x11grab", "-video_size",
                               fmt::format("{}x{}", screen.width, screen.height), "-i", fmt::format(":{}", display),
                               "-frames:v", "1", "-vf", fmt::format("scale={}:{}:flags=area", size.width, size.height),
                               "-f", "image2pipe", "-vcodec", "png", "-"},
                      .deadline = kCaptureDeadline,
                      .output = ActionPlan::Output::Png};
}

}  // namespace

Result<DesktopRequest> parse_start_request(const Json& request) {
    DesktopRequest out;
    auto display = get_int(request, "display", out.display);
    auto width = get_int(request, "width", out.width);
    auto height = get_int(request, "height", out.height);
    auto user = get_string(request, "user", out.user);
    for (const Error* e : {display ? nullptr : &display.error(), width ? nullptr : &width.error(),
                           height ? nullptr : &height.error(), user ? nullptr : &user.error()}) {
        if (e != nullptr) {
            return e->with_code(code::kBadRequest);
        }
    }
    if (*display < 0 || *display > kMaxDisplay) {
        return bad("\"display\" must be from 0 to {}", kMaxDisplay);
    }
    for (auto [name, side] : {std::pair{"width", *width}, std::pair{"height", *height}}) {
        if (side < kMinScreenSide || side > kMaxScreenSide) {
            return bad("\"{}\" must be from {} to {}", name, kMinScreenSide, kMaxScreenSide);
        }
    }
    if (user->empty() || user->find('\0') != std::string::npos) {
        return bad("\"user\" must be a user name or uid");
    }
    out.display = static_cast<std::uint32_t>(*display);
    out.width = static_cast<std::uint32_t>(*width);
    out.height = static_cast<std::uint32_t>(*height);
    out.user = std::move(*user);
    return out;
}

Result<ActionPlan> plan_action(const Json& request, ScreenSize screen, std::uint32_t display) {
    auto action = get_string(request, "action");
    if (!action) {
        return bad("\"action\" is required (a string)");
    }
    const std::string& a = *action;
    if (a == "screenshot" || a == "zoom") {
        return plan_capture(request, a, screen, display);
    }
    if (a == "left_click" || a == "right_click" || a == "middle_click" || a == "double_click" ||
        a == "triple_click") {
        return plan_click(request, a, screen);
    }
    if (a == "scroll") {
        return plan_scroll(request, screen);
    }
    if (a == "mouse_move" || a == "left_click_drag") {
        const bool drag = a == "left_click_drag";
        if (auto r = only_fields(request, a, {"coordinate", "start_coordinate"}); !r || (!drag && present(request, "start_coordinate"))) {
            return r ? bad("\"start_coordinate\" is not accepted by {}", a) : r.error();
        }
        auto to = point(request, "coordinate", screen);
        if (!to) {
            return to.error();
        }
        ActionPlan plan{.argv = {"xdotool"}, .deadline = kRunDeadline};
        if (drag) {
            auto from = point(request, "start_coordinate", screen);
            if (!from) {
                return from.error();
            }
            move_to(plan.argv, *from);
            append(plan.argv, {"mousedown", "1"});
        }
        move_to(plan.argv, *to);
        if (drag) {
            append(plan.argv, {"mouseup", "1"});
        }
        return plan;
    }
    if (a == "left_mouse_down" || a == "left_mouse_up") {
        if (auto r = only_fields(request, a, {"coordinate"}); !r) {
            return r.error();
        }
        auto p = optional_point(request, "coordinate", screen);
        if (!p) {
            return p.error();
        }
        ActionPlan plan{.argv = {"xdotool"}, .deadline = kRunDeadline};
        move_to(plan.argv, *p);
        append(plan.argv, {a == "left_mouse_down" ? "mousedown" : "mouseup", "1"});
        return plan;
    }
    if (a == "type") {
        if (auto r = only_fields(request, a, {"text"}); !r) {
            return r.error();
        }
        if (!present(request, "text") || !request["text"].is_string()) {
            return bad("\"text\" (a string) is required by type");
        }
        std::string text = request["text"].get<std::string>();
        if (text.empty() || text.size() > kMaxTypeBytes || text.find('\0') != std::string::npos) {
            return bad("\"text\" must be 1 to {} bytes, without NUL", kMaxTypeBytes);
        }
        // xdotool types '\n' as the Linefeed key, which most programs ignore;
        // Anthropic's reference implementation sends Return ('\r') instead.
        std::replace(text.begin(), text.end(), '\n', '\r');
        const auto deadline = kRunDeadline + kTypePerByte * static_cast<std::int64_t>(text.size());
        return ActionPlan{.argv = {"xdotool", "type", "--delay", num(kTypingDelayMs), "--", std::move(text)},
                          .deadline = deadline};
    }
    if (a == "key" || a == "hold_key") {
        const bool hold = a == "hold_key";
        if (auto r = only_fields(request, a, {"text", "duration"}); !r || (!hold && present(request, "duration"))) {
            return r ? bad("\"duration\" is not accepted by key") : r.error();
        }
        auto combos = key_combos(request, a);
        if (!combos) {
            return combos.error();
        }
        ActionPlan plan{.argv = {"xdotool", hold ? "keydown" : "key"}, .deadline = kRunDeadline};
        if (!hold) {
            plan.argv.emplace_back("--");
        }
        plan.argv.insert(plan.argv.end(), combos->begin(), combos->end());
        if (hold) {
            auto held = duration(request, a);
            if (!held) {
                return held.error();
            }
            append(plan.argv, {"sleep", seconds_text(*held), "keyup"});
            plan.argv.insert(plan.argv.end(), combos->rbegin(), combos->rend());
            plan.deadline += *held;
        }
        return plan;
    }
    if (a == "cursor_position") {
        if (auto r = only_fields(request, a, {}); !r) {
            return r.error();
        }
        return ActionPlan{.argv = {"xdotool", "getmouselocation", "--shell"},
                          .deadline = kRunDeadline,
                          .output = ActionPlan::Output::MouseLocation};
    }
    if (a == "wait") {
        if (auto r = only_fields(request, a, {"duration"}); !r) {
            return r.error();
        }
        auto d = duration(request, a);
        if (!d) {
            return d.error();
        }
        return ActionPlan{.argv = {}, .deadline = {}, .sleep = *d};
    }
    return bad("unknown action \"{}\"", a.substr(0, 64));
}

ScreenSize fit_within(ScreenSize screen, std::optional<std::uint32_t> max_width,
                      std::optional<std::uint32_t> max_height) {
    const double w = screen.width;
    const double h = screen.height;
    double scale = 1;
    if (max_width && *max_width < w) {
        scale = std::min(scale, *max_width / w);
    }
    if (max_height && *max_height < h) {
        scale = std::min(scale, *max_height / h);
    }
    if (scale >= 1) {
        return screen;
    }
    auto side = [&](double v, std::optional<std::uint32_t> limit) {
        auto n = static_cast<std::uint32_t>(std::max<std::int64_t>(1, std::llround(v * scale)));
        return limit ? std::min(n, *limit) : n;
    };
    return ScreenSize{side(w, max_width), side(h, max_height)};
}

std::optional<ScreenSize> png_size(std::string_view bytes) {
    // The signature, then the first chunk: length 13, type "IHDR", width, height (big-endian).
    constexpr std::string_view kStart("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
    if (bytes.size() < 24 || bytes.substr(0, 16) != kStart) {
        return std::nullopt;
    }
    auto be32 = [&](std::size_t at) {
        std::uint32_t v = 0;
        for (std::size_t i = 0; i < 4; ++i) {
            v = (v << 8) | static_cast<std::uint8_t>(bytes[at + i]);
        }
        return v;
    };
    const ScreenSize size{be32(16), be32(20)};
    if (size.width == 0 || size.height == 0 || size.width > 0x7fffffff || size.height > 0x7fffffff) {
        return std::nullopt;
    }
    return size;
}

std::optional<std::pair<std::int64_t, std::int64_t>> parse_mouse_location(std::string_view text) {
    std::optional<std::int64_t> x;
    std::optional<std::int64_t> y;
    while (!text.empty()) {
        const std::size_t nl = std::min(text.find('\n'), text.size());
        const std::string_view line = text.substr(0, nl);
        text.remove_prefix(std::min(nl + 1, text.size()));
        auto value = [&](std::string_view key) -> std::optional<std::int64_t> {
            if (!line.starts_with(key) || line.size() == key.size() || line.size() > key.size() + 9) {
                return std::nullopt;
            }
            std::int64_t v = 0;
            for (char c : line.substr(key.size())) {
                if (c < '0' || c > '9') {
                    return std::nullopt;
                }
                v = v * 10 + (c - '0');
            }
            return v;
        };
        if (auto v = value("X=")) {
            x = v;
        } else if (auto w = value("Y=")) {
            y = w;
        }
    }
    if (!x || !y) {
        return std::nullopt;
    }
    return std::pair{*x, *y};
}

}  // namespace sbx::agent

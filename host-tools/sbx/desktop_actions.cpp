#include "host-tools/sbx/desktop_actions.hpp"

#include <charconv>
#include <cstdint>
#include <string_view>

namespace sbx::cli {

namespace {

Error usage(std::string message) { return Error{std::move(message), 0, "usage"}; }

// A screen coordinate: a whole number 0 or more.
Result<std::int64_t> coordinate(const std::string& text, std::string_view what) {
    std::int64_t value = -1;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
        return usage(fmt::format("desktop: {} must be a whole number 0 or more, not '{}'", what, text));
    }
    return value;
}

Result<Json> point(const std::vector<std::string>& words, std::size_t at) {
    auto x = coordinate(words[at], "X");
    auto y = coordinate(words[at + 1], "Y");
    if (!x || !y) {
        return !x ? x.error() : y.error();
    }
    return Json::array({*x, *y});
}

}  // namespace

Result<Json> desktop_action_body(const std::vector<std::string>& words, const DesktopFlags& flags) {
    if (words.empty()) {
        return usage("desktop: want an action (click, move, type, key, scroll, cursor)");
    }
    const std::string& verb = words.front();
    // The number of words after the verb; then X and Y for a verb that takes them.
    auto check = [&](std::size_t least, std::size_t most, std::string_view form) -> Result<Json> {
        if (words.size() - 1 < least || words.size() - 1 > most) {
            return usage(fmt::format("desktop: want {}", form));
        }
        return least >= 2 ? point(words, 1) : Result<Json>(Json());
    };
    const bool other_button = flags.button != "left";
    if (verb != "click" && (other_button || flags.double_click || flags.triple_click)) {
        return usage("desktop: --button, --double and --triple go with click");
    }
    if (verb == "click") {
        auto at = check(2, 2, "click X Y [--button left|right|middle] [--double|--triple]");
        if (!at) {
            return at.error();
        }
        if (flags.button != "left" && flags.button != "right" && flags.button != "middle") {
            return usage(fmt::format("desktop: --button is left, right or middle, not '{}'", flags.button));
        }
        if ((flags.double_click || flags.triple_click) && (other_button || (flags.double_click && flags.triple_click))) {
            return usage("desktop: --double or --triple, with the left button");
        }
        std::string action = flags.double_click   ? "double_click"
                             : flags.triple_click ? "triple_click"
                                                  : flags.button + "_click";
        return Json{{"action", action}, {"coordinate", *at}};
    }
    if (verb == "move") {
        auto at = check(2, 2, "move X Y");
        if (!at) {
            return at.error();
        }
        return Json{{"action", "mouse_move"}, {"coordinate", *at}};
    }
    if (verb == "type" || verb == "key") {
        if (auto r = check(1, 1, verb == "type" ? "type TEXT" : "key KEYS (xdotool's names: ctrl+s, Return)"); !r) {
            return r.error();
        }
        return Json{{"action", verb}, {"text", words[1]}};
    }
    if (verb == "scroll") {
        auto at = check(3, 4, "scroll X Y up|down|left|right [N]");
        if (!at) {
            return at.error();
        }
        const std::string& direction = words[3];
        if (direction != "up" && direction != "down" && direction != "left" && direction != "right") {
            return usage(fmt::format("desktop: scroll's direction is up, down, left or right, not '{}'", direction));
        }
        std::int64_t amount = 3;
        if (words.size() == 5) {
            auto n = coordinate(words[4], "N");
            if (!n) {
                return n.error();
            }
            amount = *n;
        }
        return Json{{"action", "scroll"}, {"coordinate", *at}, {"scroll_direction", direction}, {"scroll_amount", amount}};
    }
    if (verb == "cursor") {
        if (auto r = check(0, 0, "cursor"); !r) {
            return r.error();
        }
        return Json{{"action", "cursor_position"}};
    }
    return usage(fmt::format("desktop: unknown action '{}' (click, move, type, key, scroll, cursor)", verb));
}

}  // namespace sbx::cli

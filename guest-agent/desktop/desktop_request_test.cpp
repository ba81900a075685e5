// The desktop ops' request checks and the argument vectors each action
// runs (docs/agent-protocol.md, "Desktop"), as data: no X server here.
#include <doctest/doctest.h>

// desktop_service.hpp (frame.hpp) before messages.hpp: FrameKind::Json
// would shadow messages.hpp's Json.
#include "guest-agent/desktop/desktop_service.hpp"

#include "guest-agent/desktop/desktop_request.hpp"
#include "guest-agent/desktop/desktop_run.hpp"

using namespace sbx;
using namespace sbx::agent;

namespace {

constexpr ScreenSize kScreen{1280, 800};
using Argv = std::vector<std::string>;

ActionPlan plan(const Json& request) {
    auto p = plan_action(request, kScreen, 1);
    REQUIRE_MESSAGE(p, (p ? "" : p.error().to_string()));
    return *p;
}

Argv argv(const Json& request) {
    return plan(request).argv;
}

// The request is refused as a bad request whose message mentions `word`.
void refused(const Json& request, std::string_view word) {
    auto p = plan_action(request, kScreen, 1);
    REQUIRE_FALSE(p);
    CHECK(p.error().code == "bad_request");
    CHECK_MESSAGE(p.error().message.find(word) != std::string::npos, p.error().message);
}

}  // namespace

TEST_CASE("desktop_start's fields: defaults and bounds") {
    auto d = parse_start_request(Json{{"type", "request"}});
    REQUIRE(d);
    CHECK(d->display == 1);
    CHECK(d->width == 1280);
    CHECK(d->height == 800);
    CHECK(d->user == "user");
    auto e = parse_start_request(Json{{"display", 7}, {"width", 64}, {"height", 8192}, {"user", "root"}});
    REQUIRE(e);
    CHECK(e->display == 7);
    CHECK(e->width == 64);
    CHECK(e->height == 8192);
    for (const Json& bad : {Json{{"display", -1}}, Json{{"display", 100}}, Json{{"display", "1"}},
                            Json{{"width", 63}}, Json{{"height", 8193}}, Json{{"width", 1.5}}, Json{{"user", ""}},
                            Json{{"user", 5}}}) {
        auto r = parse_start_request(bad);
        CHECK_MESSAGE(!r, bad.dump());
        CHECK(!r ? r.error().code == "bad_request" : false);
    }
}

TEST_CASE("the X server's argv") {
    DesktopRequest r{.display = 3, .width = 1024, .height = 768, .user = "user"};
    CHECK(x_server_argv(DesktopConfig::Server::Tigervnc, r) ==
          Argv{"Xtigervnc", ":3", "-geometry", "1024x768", "-depth", "24", "-rfbport", "5903", "-localhost",
               "-SecurityTypes", "None", "-AlwaysShared", "-nolisten", "tcp"});
    CHECK(x_server_argv(DesktopConfig::Server::Xvfb, r) ==
          Argv{"Xvfb", ":3", "-screen", "0", "1024x768x24", "-nolisten", "tcp"});
}

TEST_CASE("mouse actions: argv") {
    CHECK(argv({{"action", "mouse_move"}, {"coordinate", {10, 20}}}) == Argv{"xdotool", "mousemove", "10", "20"});
    CHECK(argv({{"action", "left_click"}}) == Argv{"xdotool", "click", "1"});
    CHECK(argv({{"action", "left_click"}, {"coordinate", {0, 0}}}) ==
          Argv{"xdotool", "mousemove", "0", "0", "click", "1"});
    CHECK(argv({{"action", "right_click"}, {"coordinate", {1279, 799}}}) ==
          Argv{"xdotool", "mousemove", "1279", "799", "click", "3"});
    CHECK(argv({{"action", "middle_click"}}) == Argv{"xdotool", "click", "2"});
    CHECK(argv({{"action", "double_click"}, {"coordinate", {5, 6}}}) ==
          Argv{"xdotool", "mousemove", "5", "6", "click", "--repeat", "2", "--delay", "10", "1"});
    CHECK(argv({{"action", "triple_click"}}) == Argv{"xdotool", "click", "--repeat", "3", "--delay", "10", "1"});
    CHECK(argv({{"action", "left_click"}, {"coordinate", {1, 2}}, {"text", "ctrl+shift"}}) ==
          Argv{"xdotool", "mousemove", "1", "2", "keydown", "ctrl+shift", "click", "1", "keyup", "ctrl+shift"});
    CHECK(argv({{"action", "left_click"}, {"text", "shift ctrl"}}) ==
          Argv{"xdotool", "keydown", "shift", "ctrl", "click", "1", "keyup", "ctrl", "shift"});
    CHECK(argv({{"action", "left_click_drag"}, {"start_coordinate", {1, 2}}, {"coordinate", {30, 40}}}) ==
          Argv{"xdotool", "mousemove", "1", "2", "mousedown", "1", "mousemove", "30", "40", "mouseup", "1"});
    CHECK(argv({{"action", "left_mouse_down"}}) == Argv{"xdotool", "mousedown", "1"});
    CHECK(argv({{"action", "left_mouse_up"}, {"coordinate", {3, 4}}}) ==
          Argv{"xdotool", "mousemove", "3", "4", "mouseup", "1"});
    CHECK(argv({{"action", "scroll"}, {"scroll_direction", "down"}, {"scroll_amount", 3}}) ==
          Argv{"xdotool", "click", "--repeat", "3", "--delay", "10", "5"});
    CHECK(argv({{"action", "scroll"},
                {"coordinate", {100, 200}},
                {"scroll_direction", "left"},
                {"scroll_amount", 1},
                {"text", "shift"}}) == Argv{"xdotool", "mousemove", "100", "200", "keydown", "shift", "click",
                                            "--repeat", "1", "--delay", "10", "6", "keyup", "shift"});
    CHECK(argv({{"action", "scroll"}, {"scroll_direction", "up"}, {"scroll_amount", 100}}).back() == "4");
    CHECK(argv({{"action", "scroll"}, {"scroll_direction", "right"}, {"scroll_amount", 2}}).back() == "7");
    // Null counts as absent (what a client serialising optional fields sends).
    CHECK(argv({{"action", "left_click"}, {"coordinate", nullptr}, {"text", nullptr}}) == Argv{"xdotool", "click", "1"});
    // The request's own keys are no action fields.
    CHECK(argv({{"type", "request"}, {"op", "desktop_action"}, {"action", "left_click"}}) ==
          Argv{"xdotool", "click", "1"});
}

TEST_CASE("keyboard actions: argv") {
    CHECK(argv({{"action", "type"}, {"text", "hi -- there\nnext"}}) ==
          Argv{"xdotool", "type", "--delay", "12", "--", "hi -- there\rnext"});
    CHECK(argv({{"action", "type"}, {"text", "exec rm -rf /"}}) ==
          Argv{"xdotool", "type", "--delay", "12", "--", "exec rm -rf /"});  // type takes every argument as text
    CHECK(argv({{"action", "key"}, {"text", "ctrl+s"}}) == Argv{"xdotool", "key", "--", "ctrl+s"});
    CHECK(argv({{"action", "key"}, {"text", "  ctrl+a  Delete KP_Enter F4 "}}) ==
          Argv{"xdotool", "key", "--", "ctrl+a", "Delete", "KP_Enter", "F4"});
    CHECK(argv({{"action", "hold_key"}, {"text", "shift"}, {"duration", 1.5}}) ==
          Argv{"xdotool", "keydown", "shift", "sleep", "1.500", "keyup", "shift"});
    CHECK(argv({{"action", "hold_key"}, {"text", "a b"}, {"duration", 0}}) ==
          Argv{"xdotool", "keydown", "a", "b", "sleep", "0.000", "keyup", "b", "a"});
    CHECK(argv({{"action", "cursor_position"}}) == Argv{"xdotool", "getmouselocation", "--shell"});
}

TEST_CASE("deadlines, waits and outputs") {
    CHECK(plan({{"action", "left_click"}}).deadline == std::chrono::seconds(10));
    CHECK(plan({{"action", "type"}, {"text", "abcd"}}).deadline == std::chrono::milliseconds(10'080));
    CHECK(plan({{"action", "hold_key"}, {"text", "a"}, {"duration", 2}}).deadline == std::chrono::seconds(12));
    auto wait = plan({{"action", "wait"}, {"duration", 0.25}});
    CHECK(wait.argv.empty());
    CHECK(wait.sleep == std::chrono::milliseconds(250));
    CHECK(plan({{"action", "cursor_position"}}).output == ActionPlan::Output::MouseLocation);
    CHECK(plan({{"action", "mouse_move"}, {"coordinate", {1, 1}}}).output == ActionPlan::Output::None);
}

TEST_CASE("captures: maim at full size, ffmpeg to scale, zoom's region") {
    auto shot = plan({{"action", "screenshot"}});
    CHECK(shot.argv == Argv{"maim", "-f", "png"});
    CHECK(shot.output == ActionPlan::Output::Png);
    CHECK(shot.deadline == std::chrono::seconds(30));
    CHECK(argv({{"action", "screenshot"}, {"max_width", 1280}, {"max_height", 4000}}) == Argv{"maim", "-f", "png"});
    CHECK(argv({{"action", "screenshot"}, {"max_width", 1024}}) ==
          Argv{"ffmpeg", "-nostdin", "-loglevel", "error", "-f", "x11grab", "-video_size", "1280x800", "-i", ":1",
               "-frames:v", "1", "-vf", "scale=1024:640:flags=area", "-f", "image2pipe", "-vcodec", "png", "-"});
    CHECK(argv({{"action", "zoom"}, {"region", {10, 20, 110, 70}}}) ==
          Argv{"maim", "-f", "png", "-g", "100x50+10+20"});
    CHECK(argv({{"action", "zoom"}, {"region", {0, 0, 1280, 800}}}) ==
          Argv{"maim", "-f", "png", "-g", "1280x800+0+0"});
}

TEST_CASE("fit_within keeps the aspect") {
    CHECK(fit_within(kScreen, std::nullopt, std::nullopt) == kScreen);
    CHECK(fit_within(kScreen, 2000, 2000) == kScreen);
    CHECK(fit_within(kScreen, 1024, std::nullopt) == ScreenSize{1024, 640});
    CHECK(fit_within(kScreen, std::nullopt, 400) == ScreenSize{640, 400});
    CHECK(fit_within(kScreen, 1024, 400) == ScreenSize{640, 400});
    CHECK(fit_within(kScreen, 1, 1) == ScreenSize{1, 1});
    CHECK(fit_within(ScreenSize{1366, 768}, 1000, std::nullopt) == ScreenSize{1000, 562});
}

TEST_CASE("bad actions are refused, naming what is wrong") {
    refused(Json::object(), "action");
    refused({{"action", 5}}, "action");
    refused({{"action", "click"}}, "unknown action");
    refused({{"action", "SCREENSHOT"}}, "unknown action");
    // Coordinates: missing, malformed, off the screen.
    refused({{"action", "mouse_move"}}, "coordinate");
    refused({{"action", "mouse_move"}, {"coordinate", {1}}}, "coordinate");
    refused({{"action", "mouse_move"}, {"coordinate", {1, 2, 3}}}, "coordinate");
    refused({{"action", "mouse_move"}, {"coordinate", {1.5, 2}}}, "coordinate");
    refused({{"action", "mouse_move"}, {"coordinate", {"1", "2"}}}, "coordinate");
    refused({{"action", "mouse_move"}, {"coordinate", {{"x", 1}, {"y", 2}}}}, "coordinate");
    refused({{"action", "mouse_move"}, {"coordinate", {-1, 0}}}, "off the");
    refused({{"action", "mouse_move"}, {"coordinate", {1280, 0}}}, "off the");
    refused({{"action", "left_click"}, {"coordinate", {0, 800}}}, "off the");
    refused({{"action", "scroll"}, {"coordinate", {5000, 5}}, {"scroll_direction", "up"}, {"scroll_amount", 1}},
            "off the");
    refused({{"action", "left_click_drag"}, {"coordinate", {1, 1}}}, "start_coordinate");
    refused({{"action", "left_click_drag"}, {"start_coordinate", {1, 1}}}, "coordinate");
    refused({{"action", "left_click_drag"}, {"start_coordinate", {1, 900}}, {"coordinate", {1, 1}}}, "off the");
    // Fields an action does not take.
    refused({{"action", "mouse_move"}, {"coordinate", {1, 1}}, {"text", "a"}}, "\"text\" is not accepted");
    refused({{"action", "mouse_move"}, {"coordinate", {1, 1}}, {"start_coordinate", {1, 1}}}, "start_coordinate");
    refused({{"action", "key"}, {"text", "a"}, {"coordinate", {1, 1}}}, "coordinate");
    refused({{"action", "key"}, {"text", "a"}, {"duration", 1}}, "duration");
    refused({{"action", "type"}, {"text", "a"}, {"coordinate", {1, 1}}}, "coordinate");
    refused({{"action", "screenshot"}, {"coordinate", {1, 1}}}, "coordinate");
    refused({{"action", "zoom"}, {"region", {0, 0, 1, 1}}, {"max_width", 5}}, "max_width");
    refused({{"action", "cursor_position"}, {"coordinate", {1, 1}}}, "coordinate");
    refused({{"action", "left_click_drag"}, {"start_coordinate", {1, 1}}, {"coordinate", {2, 2}}, {"text", "shift"}},
            "text");
    refused({{"action", "wait"}, {"duration", 1}, {"text", "a"}}, "text");
    // Scrolling.
    refused({{"action", "scroll"}, {"scroll_amount", 1}}, "scroll_direction");
    refused({{"action", "scroll"}, {"scroll_direction", "sideways"}, {"scroll_amount", 1}}, "scroll_direction");
    refused({{"action", "scroll"}, {"scroll_direction", "UP"}, {"scroll_amount", 1}}, "scroll_direction");
    refused({{"action", "scroll"}, {"scroll_direction", "up"}}, "scroll_amount");
    refused({{"action", "scroll"}, {"scroll_direction", "up"}, {"scroll_amount", 0}}, "scroll_amount");
    refused({{"action", "scroll"}, {"scroll_direction", "up"}, {"scroll_amount", 101}}, "scroll_amount");
    refused({{"action", "scroll"}, {"scroll_direction", "up"}, {"scroll_amount", "3"}}, "scroll_amount");
    // Text and keys.
    refused({{"action", "type"}}, "text");
    refused({{"action", "type"}, {"text", ""}}, "text");
    refused({{"action", "type"}, {"text", 5}}, "text");
    refused({{"action", "type"}, {"text", std::string(4097, 'a')}}, "text");
    refused({{"action", "type"}, {"text", std::string("a\0b", 3)}}, "NUL");
    refused({{"action", "key"}}, "text");
    refused({{"action", "key"}, {"text", "   "}}, "no key");
    refused({{"action", "key"}, {"text", "ctrl+"}}, "keysym");
    refused({{"action", "key"}, {"text", "+a"}}, "keysym");
    refused({{"action", "key"}, {"text", "ctrl++a"}}, "keysym");
    refused({{"action", "key"}, {"text", "-a"}}, "keysym");
    refused({{"action", "key"}, {"text", "a;b"}}, "keysym");
    refused({{"action", "key"}, {"text", "a\tb"}}, "keysym");
    refused({{"action", "key"}, {"text", "a exec xterm"}}, "xdotool command");
    refused({{"action", "key"}, {"text", "sleep"}}, "xdotool command");
    refused({{"action", "key"}, {"text", "a EXEC xterm"}}, "xdotool command");  // xdotool ignores case
    refused({{"action", "key"}, {"text", "Sleep"}}, "xdotool command");
    refused({{"action", "key"}, {"text", "MouseMove"}}, "xdotool command");
    refused({{"action", "left_click"}, {"text", "shift mousemove"}}, "xdotool command");
    refused({{"action", "hold_key"}, {"text", "type"}, {"duration", 1}}, "xdotool command");
    refused({{"action", "key"}, {"text", std::string(1025, 'a')}}, "1024");
    std::string many;
    for (int i = 0; i < 65; ++i) {
        many += "a ";
    }
    refused({{"action", "key"}, {"text", many}}, "64");
    refused({{"action", "left_click"}, {"text", 3}}, "text");
    // Durations.
    refused({{"action", "wait"}}, "duration");
    refused({{"action", "wait"}, {"duration", -1}}, "duration");
    refused({{"action", "wait"}, {"duration", 100.5}}, "duration");
    refused({{"action", "wait"}, {"duration", "1"}}, "duration");
    refused({{"action", "hold_key"}, {"text", "a"}}, "duration");
    refused({{"action", "hold_key"}, {"duration", 1}}, "text");
    // Images.
    refused({{"action", "screenshot"}, {"max_width", 0}}, "max_width");
    refused({{"action", "screenshot"}, {"max_height", 8193}}, "max_height");
    refused({{"action", "screenshot"}, {"max_width", "big"}}, "max_width");
    refused({{"action", "zoom"}}, "region");
    refused({{"action", "zoom"}, {"region", {0, 0, 10}}}, "region");
    refused({{"action", "zoom"}, {"region", {10, 0, 10, 10}}}, "region");
    refused({{"action", "zoom"}, {"region", {0, 10, 10, 5}}}, "region");
    refused({{"action", "zoom"}, {"region", {-1, 0, 10, 10}}}, "region");
    refused({{"action", "zoom"}, {"region", {0, 0, 1281, 10}}}, "region");
    refused({{"action", "zoom"}, {"region", {0, 0, 10, 801}}}, "region");
    refused({{"action", "zoom"}, {"region", {0, 0, 10.5, 10}}}, "region");
}

TEST_CASE("png_size reads IHDR and refuses what is not a PNG") {
    std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x05\0\0\0\x03\x20", 24);
    auto size = png_size(png);
    REQUIRE(size);
    CHECK(*size == ScreenSize{1280, 800});
    CHECK_FALSE(png_size(png.substr(0, 23)));
    CHECK_FALSE(png_size(""));
    std::string jpeg = png;
    jpeg[1] = 'J';
    CHECK_FALSE(png_size(jpeg));
    std::string zero = png;
    zero[19] = 0;
    zero[18] = 0;
    CHECK_FALSE(png_size(zero));
}

TEST_CASE("parse_mouse_location reads getmouselocation --shell") {
    auto p = parse_mouse_location("X=12\nY=345\nSCREEN=0\nWINDOW=1305\n");
    REQUIRE(p);
    CHECK(p->first == 12);
    CHECK(p->second == 345);
    CHECK_FALSE(parse_mouse_location("X=12\n"));
    CHECK_FALSE(parse_mouse_location("X=-1\nY=2\n"));
    CHECK_FALSE(parse_mouse_location("X=\nY=2\n"));
    CHECK_FALSE(parse_mouse_location("X=99999999999\nY=2\n"));
    CHECK_FALSE(parse_mouse_location(""));
}

TEST_CASE("last_lines keeps the end, from a line start") {
    CHECK(last_lines("a\nb\nc\n", 100) == "a\nb\nc");
    CHECK(last_lines("first line\nsecond\nthird\n", 12) == "third");
    CHECK(last_lines("0123456789", 4) == "6789");
    CHECK(last_lines("", 4).empty());
}

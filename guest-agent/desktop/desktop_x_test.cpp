// The desktop on a real X server: DesktopService starts Xtigervnc (or,
// where only Xvfb is installed, Xvfb: no VNC port, and its pointer does
// not follow XTest motion, so the cursor checks are skipped) on display
// :87 with a stand-in session, then the actions run through xdotool and
// maim as in a guest. Exits 77 (SKIP) without an X server, xdotool or maim.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "guest-agent/desktop/desktop_run.hpp"
#include "guest-agent/desktop/desktop_service.hpp"
#include "guest-agent/exec/process_table.hpp"
#include "guest-agent/forward/tcp_socket.hpp"

using namespace sbx;
using namespace sbx::agent;

namespace {

constexpr std::uint32_t kDisplay = 87;
DesktopConfig::Server g_server = DesktopConfig::Server::Tigervnc;  // chosen by main() before the tests

std::string runtime_base() { return fmt::format("/tmp/sbx-desktop-x-test-run.{}", ::getpid()); }

DesktopConfig test_config() {
    DesktopConfig config;
    config.server = g_server;
    // The session leaves a mark in its runtime directory (session_marked)
    // when it has its display and that directory is its own, 0700.
    config.session = {"sh", "-c",
                      "test -n \"$DISPLAY\" && test -d \"$XDG_RUNTIME_DIR\" && test -O \"$XDG_RUNTIME_DIR\" && "
                      "test \"$(stat -c %a \"$XDG_RUNTIME_DIR\")\" = 700 && touch \"$XDG_RUNTIME_DIR/session-ok\" && "
                      "exec sleep 600"};
    config.session_programs = {"sh"};
    config.start_timeout = std::chrono::seconds(30);
    config.runtime_dir_base = runtime_base();
    return config;
}

bool session_marked() {
    const std::string mark = fmt::format("{}/{}/session-ok", runtime_base(), ::geteuid());
    for (int i = 0; i < 300; ++i) {
        if (::access(mark.c_str(), F_OK) == 0) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

DesktopRequest test_desktop() {
    return DesktopRequest{.display = kDisplay, .width = 640, .height = 400, .user = std::to_string(::geteuid())};
}

AgentOptions test_options() {
    AgentOptions options;
    options.env_file = "/nonexistent/sbx-desktop-test-env";
    return options;
}

ActionResult act(DesktopService& service, const Json& action) {
    auto r = service.act(test_options(), action);
    REQUIRE_MESSAGE(r, (action.dump() + ": " + (r ? std::string() : r.error().code + " " + r.error().to_string())));
    return *r;
}

std::pair<std::int64_t, std::int64_t> cursor(DesktopService& service) {
    auto fields = act(service, {{"action", "cursor_position"}}).fields;
    return {fields["x"].get<std::int64_t>(), fields["y"].get<std::int64_t>()};
}

}  // namespace

TEST_CASE("a real X server: start, images, mouse and keys") {
    ProcessTable processes;
    DesktopService service(test_config());
    auto started = service.start(processes, test_options(), test_desktop());
    REQUIRE_MESSAGE(started, (started ? "" : started.error().code + " " + started.error().to_string()));
    CHECK(started->second);
    const DesktopStatus& status = started->first;
    CHECK(status.running);
    CHECK(status.desktop.width == 640);
    CHECK(status.desktop.height == 400);
    CHECK(status.session_running);
    CHECK_MESSAGE(session_marked(), "the session never saw its display and its own runtime directory");
    const bool vnc = g_server == DesktopConfig::Server::Tigervnc;
    if (vnc) {
        REQUIRE(status.vnc_port == 5900 + kDisplay);
        // RFC 6143 §7.1.1: the server speaks first, "RFB 003.008\n".
        auto address = parse_tcp_address("127.0.0.1", *status.vnc_port);
        REQUIRE(address);
        auto fd = connect_tcp(*address, std::chrono::seconds(5));
        REQUIRE(fd);
        char banner[12] = {};
        REQUIRE(::read(fd->get(), banner, sizeof banner) == 12);
        CHECK(std::string_view(banner, 4) == "RFB ");
    }

    SUBCASE("a second start reports the running desktop") {
        auto again = service.start(processes, test_options(), DesktopRequest{.display = 3, .width = 100, .height = 100,
                                                                             .user = "root"});
        REQUIRE(again);
        CHECK_FALSE(again->second);
        CHECK(again->first.desktop.display == kDisplay);
        CHECK(again->first.desktop.width == 640);
    }
    SUBCASE("another service finds the display in use") {
        DesktopService other(test_config());
        auto r = other.start(processes, test_options(), test_desktop());
        REQUIRE_FALSE(r);
        CHECK(r.error().code == "start_failed");
        CHECK_MESSAGE(r.error().message.find("in use") != std::string::npos, r.error().message);
    }
    SUBCASE("screenshot: a PNG of the screen's size") {
        auto shot = act(service, {{"action", "screenshot"}});
        CHECK(shot.fields["width"] == 640);
        CHECK(shot.fields["height"] == 400);
        CHECK(shot.fields["bytes"] == shot.png.size());
        auto size = png_size(shot.png);
        REQUIRE(size);
        CHECK(*size == ScreenSize{640, 400});
        std::ofstream("/tmp/sbx-desktop-x-test.png", std::ios::binary) << shot.png;
    }
    SUBCASE("a downscaled screenshot keeps the aspect") {
        if (!find_program("ffmpeg", kDefaultPath)) {
            MESSAGE("skipped: no ffmpeg here");
            return;
        }
        auto shot = act(service, {{"action", "screenshot"}, {"max_width", 320}});
        CHECK(png_size(shot.png) == std::optional(ScreenSize{320, 200}));
        CHECK(shot.fields["width"] == 320);
    }
    SUBCASE("zoom: the region at full resolution") {
        auto zoom = act(service, {{"action", "zoom"}, {"region", {10, 20, 110, 70}}});
        CHECK(png_size(zoom.png) == std::optional(ScreenSize{100, 50}));
    }
    SUBCASE("the cursor follows mouse_move, clicks and drags") {
        if (!vnc) {
            MESSAGE("skipped: Xvfb's pointer does not follow XTest motion");
            return;
        }
        act(service, {{"action", "mouse_move"}, {"coordinate", {100, 200}}});
        CHECK(cursor(service) == std::pair<std::int64_t, std::int64_t>{100, 200});
        act(service, {{"action", "mouse_move"}, {"coordinate", {100, 200}}});  // already there: no hang
        act(service, {{"action", "left_click"}, {"coordinate", {50, 60}}, {"text", "shift"}});
        CHECK(cursor(service) == std::pair<std::int64_t, std::int64_t>{50, 60});
        act(service, {{"action", "left_click_drag"}, {"start_coordinate", {1, 2}}, {"coordinate", {639, 399}}});
        CHECK(cursor(service) == std::pair<std::int64_t, std::int64_t>{639, 399});
        act(service, {{"action", "double_click"}});
        act(service, {{"action", "triple_click"}, {"coordinate", {5, 5}}});
        act(service, {{"action", "left_mouse_down"}, {"coordinate", {7, 8}}});
        act(service, {{"action", "left_mouse_up"}});
        act(service, {{"action", "scroll"}, {"coordinate", {30, 30}}, {"scroll_direction", "down"},
                      {"scroll_amount", 2}, {"text", "ctrl"}});
        CHECK(cursor(service) == std::pair<std::int64_t, std::int64_t>{30, 30});
    }
    SUBCASE("keys, typing, holding and waiting") {
        act(service, {{"action", "key"}, {"text", "ctrl+a Escape"}});
        act(service, {{"action", "type"}, {"text", "hello -- world\n"}});
        act(service, {{"action", "hold_key"}, {"text", "shift"}, {"duration", 0.1}});
        act(service, {{"action", "wait"}, {"duration", 0.05}});
        auto unknown = act(service, {{"action", "key"}, {"text", "NoSuchKeyName"}});
        CHECK_MESSAGE(unknown.fields.value("stderr", "").find("NoSuchKeyName") != std::string::npos,
                      unknown.fields.dump());
    }
    SUBCASE("coordinates off the screen are bad requests") {
        auto r = service.act(test_options(), {{"action", "mouse_move"}, {"coordinate", {640, 0}}});
        REQUIRE_FALSE(r);
        CHECK(r.error().code == "bad_request");
    }
}

TEST_CASE("an X server that is not ready in time is start_failed, and killed") {
    ProcessTable processes;
    DesktopConfig config = test_config();
    config.start_timeout = std::chrono::milliseconds(0);
    DesktopService service(config);
    auto r = service.start(processes, test_options(), test_desktop());
    REQUIRE_FALSE(r);
    CHECK(r.error().code == "start_failed");
    CHECK_FALSE(service.status().running);
    auto list = processes.list();
    REQUIRE(list.size() == 1);
    for (int i = 0; i < 200 && list[0]->snapshot().running; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK_FALSE(list[0]->snapshot().running);
}

TEST_CASE("the XFCE session, where it is installed") {
    if (g_server != DesktopConfig::Server::Tigervnc || !find_program("startxfce4", kDefaultPath) ||
        !find_program("dbus-launch", kDefaultPath)) {
        MESSAGE("skipped: needs Xtigervnc, startxfce4 and dbus-launch");
        return;
    }
    ProcessTable processes;
    DesktopService service;  // the agent's own configuration
    DesktopRequest desktop = test_desktop();
    desktop.display = kDisplay - 1;
    desktop.width = 1280;
    desktop.height = 800;
    auto started = service.start(processes, test_options(), desktop);
    REQUIRE_MESSAGE(started, (started ? "" : started.error().code + " " + started.error().to_string()));
    // XFCE takes a few seconds to draw its panel and desktop; the session
    // must still run then (dbus-launch ends with startxfce4).
    std::this_thread::sleep_for(std::chrono::seconds(8));
    CHECK(service.status().session_running);
    // A terminal (XFCE's ctrl+alt+t) that is typed into; the screenshot is
    // left in /tmp for a person to look at.
    act(service, {{"action", "key"}, {"text", "ctrl+alt+t"}});
    std::this_thread::sleep_for(std::chrono::seconds(3));
    act(service, {{"action", "type"}, {"text", "echo typed-by-xdotool\n"}});
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const auto before = std::chrono::steady_clock::now();
    auto shot = act(service, {{"action", "screenshot"}});
    MESSAGE("a 1280x800 XFCE screenshot: ", shot.png.size(), " bytes in ",
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - before).count(),
            " ms");
    CHECK(png_size(shot.png) == std::optional(ScreenSize{1280, 800}));
    std::ofstream("/tmp/sbx-desktop-xfce.png", std::ios::binary) << shot.png;
    auto scaled = act(service, {{"action", "screenshot"}, {"max_width", 1024}});
    CHECK(png_size(scaled.png) == std::optional(ScreenSize{1024, 640}));
    // Ended as a logout would: the X server goes, the session follows and
    // dbus-launch --exit-with-session takes its bus along (SIGKILL to the
    // groups, the process table's end, would leave the bus daemons behind).
    for (auto& process : processes.list()) {
        if (process->command()["argv"][0] == "Xtigervnc") {
            process->signal_group(SIGTERM);
        }
    }
    for (int i = 0; i < 200 && service.status().session_running; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK_FALSE(service.status().running);
    CHECK_FALSE(service.status().session_running);
}

int main(int argc, char** argv) {
    auto skip = [](const char* why) {
        std::printf("SKIP: %s\n", why);
        return 77;
    };
    if (find_program("Xtigervnc", kDefaultPath)) {
        g_server = DesktopConfig::Server::Tigervnc;
    } else if (find_program("Xvfb", kDefaultPath)) {
        g_server = DesktopConfig::Server::Xvfb;
    } else {
        return skip("neither Xtigervnc (tigervnc-standalone-server) nor Xvfb (xvfb) is installed");
    }
    if (!find_program("xdotool", kDefaultPath) || !find_program("maim", kDefaultPath)) {
        return skip("xdotool or maim is not installed");
    }
    doctest::Context context(argc, argv);
    const int status = context.run();
    std::filesystem::remove_all(runtime_base());
    return status;
}

// The desktop's host side without a guest: the viewer's files and pages
// (content types, no way out of the noVNC folder), the WebSocket's
// subprotocol, the links' tokens as the proxy's backend sees them, and
// the REST routes' validation and errors.
#include <doctest/doctest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>

#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/desktop_requests.hpp"
#include "host-tools/sbxd/daemon/desktop_viewer.hpp"
#include "host-tools/sbxd/daemon/hosted_backend.hpp"
#include "host-tools/sbxd/daemon/static_files.hpp"
#include "host-tools/sbxd/testing/api_fixture.hpp"

using namespace sbx;
using namespace sbx::sbxd;
using nlohmann::json;

using testing::code_of;
using testing::header;

namespace {

void write_text(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A noVNC folder beside a secret it must never serve.
struct Files {
    testing::TempDir tmp{"sbxd-desktop"};
    std::string root = tmp.file("novnc");
    Files() {
        write_text(root + "/vnc.html", "<html>noVNC</html>");
        write_text(root + "/app/ui.js", "export default 1;");
        write_text(root + "/app/styles/base.css", "body{}");
        write_text(root + "/app/images/icons/novnc-16x16.png", "\x89PNG");
        write_text(tmp.file("secret.txt"), "TOP-SECRET-CONTENT");
        std::filesystem::create_symlink("vnc.html", root + "/vnc_auto.html");      // inside: fine
        std::filesystem::create_symlink("../secret.txt", root + "/leak.html");     // out: never
        std::filesystem::create_symlink(tmp.file("secret.txt"), root + "/abs.js");  // out, absolute
        std::filesystem::create_symlink("..", root + "/app/up");                    // a directory out
    }
};

struct Fixture {
    testing::TempDir tmp{"sbxd-desktop-api"};
    std::unique_ptr<Store> store = testing::open_store(tmp.db());
    testing::UnusedDriver driver;
    std::unique_ptr<ApiService> service;

    explicit Fixture(std::optional<ProxyInfo> proxy = ProxyInfo{"sbx.localhost", 8443}) {
        DaemonInfo info{"host-a", "test", "/images", {}};
        info.proxy = proxy;
        service = std::make_unique<ApiService>(*store, driver, info, [] { return UnixMillis{1'700'000'000'000}; });
        testing::add_sandbox(*store, "sbx_1");
    }

    http::Response call(const std::string& method, const std::string& target, std::string body = {}) const {
        return service->handle(testing::api_request(method, target, std::move(body)));
    }
};

// Reads from `fd` until `done` says the bytes so far are complete (or EOF).
template <typename Done>
std::string read_until(int fd, Done done) {
    std::string got;
    char buffer[4096];
    while (!done(got)) {
        ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n <= 0) {
            break;
        }
        got.append(buffer, static_cast<std::size_t>(n));
    }
    return got;
}

// A whole response with a Content-Length body.
bool whole_response(const std::string& got) {
    const auto end = got.find("\r\n\r\n");
    if (end == std::string::npos) {
        return false;
    }
    const auto length = got.find("Content-Length: ");
    return length != std::string::npos && length < end &&
           got.size() >= end + 4 + std::stoul(got.substr(length + 16));
}

DesktopRecord desktop_of(const std::string& id) {
    return DesktopRecord{.sandbox_id = id,
                         .subdomain = "0a1b2c3d4e",
                         .token = "control-token",
                         .view_token = "view-token",
                         .display = 1,
                         .vnc_port = 5901,
                         .width = 1280,
                         .height = 800,
                         .created_at = 1};
}

}  // namespace

TEST_CASE("static files: content types, and only regular files inside the folder") {
    Files files;
    auto html = read_static_file(files.root, "/vnc.html");
    REQUIRE(html);
    CHECK(html->body == "<html>noVNC</html>");
    CHECK(html->content_type == "text/html; charset=utf-8");
    CHECK(read_static_file(files.root, "/app/ui.js")->content_type == "text/javascript; charset=utf-8");
    CHECK(read_static_file(files.root, "/app/styles/base.css")->content_type == "text/css; charset=utf-8");
    CHECK(read_static_file(files.root, "/app/images/icons/novnc-16x16.png")->content_type == "image/png");
    CHECK(read_static_file(files.root, "/vnc_auto.html")->body == "<html>noVNC</html>");  // a symlink inside
    CHECK(content_type_for("app/locale/de.json") == "application/json");
    CHECK(content_type_for("app/images/x.svg") == "image/svg+xml");
    CHECK(content_type_for("utils/novnc_proxy") == "application/octet-stream");
    CHECK(content_type_for("a.b/c") == "application/octet-stream");
    for (const char* path : {"/leak.html", "/abs.js", "/app/up/secret.txt", "/../secret.txt", "/app/../vnc.html",
                             "/./vnc.html", "/app//ui.js", "/app", "/", "", "/missing.js", "vnc.html",
                             "/app\\ui.js"}) {
        CAPTURE(path);
        auto refused = read_static_file(files.root, path);
        REQUIRE_FALSE(refused);
        CHECK(refused.error().code == "not_found");
    }
    CHECK(read_static_file(files.tmp.file("none"), "/vnc.html").error().code == "not_found");
}

TEST_CASE("the viewer's pages: a redirect to noVNC, its files, nothing else") {
    Files files;
    Fixture fixture;
    boost::asio::io_context io;
    DesktopViewer viewer(io, *fixture.store, fixture.service->guest(), files.root);
    auto get = [&](const std::string& target, bool view_only = false, std::string method = "GET") {
        return viewer.handle(testing::api_request(std::move(method), target), "sbx_1", view_only);
    };
    auto root = get("/");
    CHECK(root.status == 302);
    CHECK(header(root, "Location") == "/vnc.html?autoconnect=true&resize=scale&path=websockify");
    CHECK(header(get("/", true), "Location") ==
          "/vnc.html?autoconnect=true&resize=scale&path=websockify&view_only=true");
    auto page = get("/vnc.html?autoconnect=true");
    CHECK(page.status == 200);
    CHECK(page.body == "<html>noVNC</html>");
    CHECK(header(page, "Content-Type") == "text/html; charset=utf-8");
    CHECK(header(page, "X-Frame-Options") == "DENY");
    CHECK(header(page, "X-Content-Type-Options") == "nosniff");
    CHECK(get("/app/ui.js").status == 200);
    // Percent-encoded dots are dots once decoded: refused as any `..`.
    for (const char* target : {"/app/%2e%2e/%2e%2e/secret.txt", "/%2E%2E/secret.txt", "/leak.html", "/app/up/secret.txt"}) {
        CAPTURE(target);
        auto refused = get(target);
        CHECK(refused.status == 404);
        CHECK(refused.body.find("TOP-SECRET") == std::string::npos);
    }
    auto post = get("/vnc.html", false, "POST");
    CHECK(post.status == 405);
    CHECK(header(post, "Allow") == "GET");
    auto not_upgraded = get("/websockify");
    CHECK(not_upgraded.status == 400);
    CHECK(code_of(not_upgraded) == "bad_request");
    auto upgrade = testing::api_request("GET", "/websockify", {}, {{"Sec-WebSocket-Protocol", "base64, binary"}});
    upgrade.websocket = true;
    auto bridged = viewer.handle(upgrade, "sbx_1", true);
    CHECK(bridged.status == 101);
    CHECK(static_cast<bool>(bridged.websocket));
    CHECK(bridged.websocket_protocol == "binary");
}

TEST_CASE("a handed-over connection: pages, then the WebSocket with its subprotocol and close code") {
    Files files;
    Fixture fixture;
    boost::asio::io_context io;
    DesktopViewer viewer(io, *fixture.store, fixture.service->guest(), files.root);
    auto guard = boost::asio::make_work_guard(io);
    std::thread io_thread([&] { io.run(); });
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    UniqueFd proxy_side(fds[1]);
    viewer.serve(UniqueFd(fds[0]), "sbx_1", true);

    const std::string get = "GET /app/ui.js HTTP/1.1\r\nHost: 0a1b2c3d4e-view.sbx.localhost\r\n\r\n";
    REQUIRE(write_all(proxy_side.get(), get.data(), get.size()));
    std::string page = read_until(proxy_side.get(), whole_response);
    CHECK(page.find("HTTP/1.1 200 OK\r\n") == 0);
    CHECK(page.find("Content-Type: text/javascript; charset=utf-8\r\n") != std::string::npos);
    CHECK(page.find("export default 1;") != std::string::npos);

    // The same connection upgraded, as noVNC's WebSocket through the proxy.
    const std::string upgrade =
        "GET /websockify HTTP/1.1\r\nHost: 0a1b2c3d4e-view.sbx.localhost\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Protocol: binary\r\n\r\n";
    REQUIRE(write_all(proxy_side.get(), upgrade.data(), upgrade.size()));
    // sbx_1 has no desktop: the bridge closes at once with 4404 (RFC 6455 §5.5.1: 0x88, length, code).
    std::string reply = read_until(proxy_side.get(), [](const std::string& got) {
        const auto end = got.find("\r\n\r\n");
        return end != std::string::npos && got.size() >= end + 4 + 4;
    });
    INFO(reply);
    CHECK(reply.find("HTTP/1.1 101 Switching Protocols\r\n") == 0);
    CHECK(reply.find("Sec-WebSocket-Protocol: binary\r\n") != std::string::npos);
    const auto frame = reply.substr(reply.find("\r\n\r\n") + 4);
    REQUIRE(frame.size() >= 4);
    CHECK(static_cast<unsigned char>(frame[0]) == 0x88);
    CHECK(((static_cast<unsigned char>(frame[2]) << 8) | static_cast<unsigned char>(frame[3])) == 4404);
    proxy_side.reset();
    guard.reset();
    io.stop();
    io_thread.join();
}

TEST_CASE("the WebSocket's subprotocol: the one wanted when offered, else none") {
    auto with = [](http::Pairs headers) { return testing::api_request("GET", "/", {}, std::move(headers)); };
    CHECK(http::choose_ws_protocol(with({}), "binary").empty());  // noVNC 1.3 offers none
    CHECK(http::choose_ws_protocol(with({{"Sec-WebSocket-Protocol", "binary"}}), "binary") == "binary");
    CHECK(http::choose_ws_protocol(with({{"sec-websocket-protocol", "chat"}, {"Sec-WebSocket-Protocol", " binary "}}),
                                   "binary") == "binary");
    CHECK(http::choose_ws_protocol(with({{"Sec-WebSocket-Protocol", "Binary, binaryx"}}), "binary").empty());
}

TEST_CASE("desktop links: each token opens its own link, no other") {
    Fixture fixture;
    REQUIRE(fixture.store->set_desktop(desktop_of("sbx_1")));
    HostedBackend backend(*fixture.store, fixture.service->guest(), std::nullopt, nullptr);
    // Without a viewer, desktop names are served by nobody.
    CHECK(backend.lookup_service("0a1b2c3d4e", "desktop").error().code == "not_found");
    boost::asio::io_context io;
    backend.serve_desktops(io);
    auto control = backend.lookup_service("0a1b2c3d4e", "desktop");
    REQUIRE(control);
    CHECK(control->sandbox_id == "sbx_1");
    CHECK(control->token == "control-token");
    CHECK_FALSE(control->is_public);
    CHECK(control->service == "desktop");
    auto view = backend.lookup_service("0a1b2c3d4e", "view");
    REQUIRE(view);
    CHECK(view->token == "view-token");  // the view-only link's token is not the control one's
    CHECK(view->service == "view");
    CHECK(backend.lookup_service("ffffffffff", "desktop").error().code == "not_found");
    CHECK(backend.lookup_service("0a1b2c3d4e", "other").error().code == "not_found");
    CHECK(backend.lookup("0a1b2c3d4e", 5901).error().code == "not_found");  // not a hosted port
}

TEST_CASE("the store keeps a desktop's links when it starts again") {
    Fixture fixture;
    auto first = fixture.store->set_desktop(desktop_of("sbx_1"));
    REQUIRE(first);
    DesktopRecord again = desktop_of("sbx_1");
    again.subdomain = "ffffffffff";
    again.token = "new";
    again.view_token = "new-view";
    again.display = 2;
    again.vnc_port = 5902;
    auto second = fixture.store->set_desktop(again);
    REQUIRE(second);
    CHECK(second->subdomain == "0a1b2c3d4e");
    CHECK(second->token == "control-token");
    CHECK(second->view_token == "view-token");
    CHECK(second->display == 2);
    CHECK(second->vnc_port == 5902);
    CHECK(*fixture.store->find_desktop("0a1b2c3d4e") == *second);
    CHECK(fixture.store->find_desktop("ffffffffff").error().code == "not_found");
    CHECK(fixture.store->set_desktop(desktop_of("sbx_nope")).error().code == "not_found");
    testing::add_sandbox(*fixture.store, "sbx_2");
    CHECK(fixture.store->set_desktop(desktop_of("sbx_2")).error().code == "already_exists");  // its subdomain
    REQUIRE(fixture.store->delete_sandbox("sbx_1", 2));
    CHECK_FALSE(fixture.store->get_desktop("sbx_1").value().has_value());  // gone with its sandbox
}

TEST_CASE("desktop URLs: the page, noVNC's settings and the link's token") {
    const DesktopRecord desktop = desktop_of("sbx_1");
    CHECK(desktop_url("sbx.localhost", 8443, desktop, false) ==
          "https://0a1b2c3d4e-desktop.sbx.localhost:8443/vnc.html?autoconnect=true&resize=scale&path=websockify"
          "&_token=control-token");
    CHECK(desktop_url("example.org", 443, desktop, true) ==
          "https://0a1b2c3d4e-view.example.org/vnc.html?autoconnect=true&resize=scale&path=websockify"
          "&view_only=true&_token=view-token");
}

TEST_CASE("desktop requests: start's fields and the actions' names") {
    auto start = parse_desktop_start(R"({"display":2,"width":1920,"height":1080})");
    REQUIRE(start);
    CHECK(desktop_start_options(*start).display == 2);
    CHECK(desktop_start_options(*start).width == 1920);
    CHECK(desktop_start_options(*parse_desktop_start("")).height == 800);  // the agent's default
    for (const char* body : {R"({"display":100})", R"({"width":63})", R"({"height":8193})", R"({"display":"1"})",
                             R"({"user":"root"})"}) {
        CAPTURE(body);
        CHECK(parse_desktop_start(body).error().code == "invalid_argument");
    }
    CHECK(parse_desktop_start("[1]").error().code == "bad_request");
    CHECK(is_desktop_action("left_click_drag"));
    CHECK(is_desktop_action("zoom"));
    CHECK_FALSE(is_desktop_action("run_shell"));
    CHECK((*parse_desktop_action(R"({"action":"type","text":"hi"})"))["text"] == "hi");
    CHECK((*screenshot_action("640"))["max_width"] == 640);
    CHECK(screenshot_action("0").error().code == "invalid_argument");
    CHECK(screenshot_action("12x").error().code == "invalid_argument");
}

TEST_CASE("desktop routes: validation first, then the sandbox, then its agent") {
    Fixture fixture;
    auto check = [&](const http::Response& response, int status, std::string_view code) {
        CAPTURE(response.body);
        CHECK(response.status == status);
        CHECK(code_of(response) == code);
    };
    check(fixture.call("POST", "/v1/sandboxes/sbx_1/desktop", R"({"display":100})"), 400, "invalid_argument");
    check(fixture.call("POST", "/v1/sandboxes/sbx_1/desktop", R"({"colour":"blue"})"), 400, "invalid_argument");
    check(fixture.call("POST", "/v1/sandboxes/sbx_1/desktop", "not json"), 400, "bad_request");
    check(fixture.call("POST", "/v1/sandboxes/sbx_nope/desktop", "{}"), 404, "not_found");
    check(fixture.call("GET", "/v1/sandboxes/sbx_nope/desktop"), 404, "not_found");
    // sbx_1 has no VMM (the driver says so): the agent cannot be reached.
    check(fixture.call("POST", "/v1/sandboxes/sbx_1/desktop", "{}"), 409, "invalid_state");
    check(fixture.call("POST", "/v1/sandboxes/sbx_1/desktop/actions", R"({"action":"fly"})"), 400, "invalid_argument");
    check(fixture.call("POST", "/v1/sandboxes/sbx_1/desktop/actions", R"({"text":"hi"})"), 400, "invalid_argument");
    check(fixture.call("POST", "/v1/sandboxes/sbx_1/desktop/actions", R"({"action":7})"), 400, "invalid_argument");
    check(fixture.call("POST", "/v1/sandboxes/sbx_nope/desktop/actions", R"({"action":"screenshot"})"), 404, "not_found");
    check(fixture.call("POST", "/v1/sandboxes/sbx_1/desktop/actions", R"({"action":"screenshot"})"), 409,
          "invalid_state");
    check(fixture.call("GET", "/v1/sandboxes/sbx_1/desktop/screenshot?maxWidth=0"), 400, "invalid_argument");
    check(fixture.call("GET", "/v1/sandboxes/sbx_1/desktop/screenshot?width=10"), 400, "invalid_argument");
    check(fixture.call("GET", "/v1/sandboxes/sbx_1/desktop/screenshot?maxWidth=640"), 409, "invalid_state");
    check(fixture.call("DELETE", "/v1/sandboxes/sbx_1/desktop"), 405, "method_not_allowed");
}

TEST_CASE("desktop errors: the agent's codes as the API's") {
    auto code = [](std::string_view agent_code) {
        return desktop_error(Error{std::string(agent_code) + ": from the agent"}).code;
    };
    CHECK(code("not_installed") == "invalid_state");
    CHECK(code("not_running") == "invalid_state");
    CHECK(code("not_found") == "invalid_argument");
    CHECK(code("bad_request") == "invalid_argument");
    CHECK(code("start_failed") == "agent_unavailable");
    CHECK(code("action_failed") == "agent_unavailable");
}

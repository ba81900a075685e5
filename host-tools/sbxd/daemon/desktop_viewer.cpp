#include "host-tools/sbxd/daemon/desktop_viewer.hpp"

#include <memory>

#include "guest-agent/desktop/desktop_client.hpp"
#include "guest-agent/forward/forward_client.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/daemon/desktop_requests.hpp"
#include "host-tools/sbxd/daemon/rfb_filter.hpp"
#include "host-tools/sbxd/daemon/static_files.hpp"
#include "host-tools/sbxd/daemon/tcp_relay.hpp"
#include "host-tools/sbxd/daemon/ws_exec.hpp"

namespace sbx::sbxd {

namespace {

using http::Request;
using http::Response;

// Every answer of the viewer: no framing by other sites (the control
// page takes clicks and keys), no type sniffing, no token in a Referer.
void add_page_headers(Response& response) {
    response.headers.emplace_back("X-Content-Type-Options", "nosniff");
    response.headers.emplace_back("X-Frame-Options", "DENY");
    response.headers.emplace_back("Content-Security-Policy", "frame-ancestors 'none'");
    response.headers.emplace_back("Referrer-Policy", "no-referrer");
    response.headers.emplace_back("Cache-Control", "no-cache");
}

}  // namespace

std::string viewer_query(bool view_only) {
    std::string query = "autoconnect=true&resize=scale&path=";
    query += kBridgePath.substr(1);
    if (view_only) {
        query += "&view_only=true";
    }
    return query;
}

DesktopViewer::DesktopViewer(boost::asio::io_context& io, Store& store, const GuestRoutes& guest,
                             std::string novnc_dir)
    : store_(store),
      guest_(guest),
      novnc_dir_(std::move(novnc_dir)),
      server_(io, workers_, [](const Request& request) {
          return Response::error(api::ApiError{404, std::string(api::code::kNotFound), "no such page"},
                                 request.request_id);
      }, http::ServerLimits{}) {}

void DesktopViewer::serve(UniqueFd connection, const std::string& sandbox_id, bool view_only) {
    server_.serve(std::move(connection), [this, sandbox_id, view_only](const Request& request) {
        return handle(request, sandbox_id, view_only);
    });
}

Response DesktopViewer::handle(const Request& request, const std::string& sandbox_id, bool view_only) const {
    Response response;
    if (request.path == kBridgePath) {
        if (!request.websocket) {
            response = Response::error(
                api::ApiError{400, std::string(api::code::kBadRequest), "this is the viewer's WebSocket"},
                request.request_id);
        } else {
            response.status = 101;
            // noVNC 1.3 offers no subprotocol; older clients and websockify's ask for "binary".
            response.websocket_protocol = http::choose_ws_protocol(request, "binary");
            response.websocket = [this, sandbox_id, view_only, request_id = request.request_id](
                                     http::WsChannel& channel) { bridge(channel, sandbox_id, view_only, request_id); };
            return response;
        }
    } else if (request.method != "GET") {
        response = Response::error(api::ApiError{405, std::string(api::code::kMethodNotAllowed),
                                                 fmt::format("{} is not allowed here", request.method)},
                                   request.request_id);
        response.headers.emplace_back("Allow", "GET");
    } else if (request.path == "/") {
        response.status = 302;
        response.headers.emplace_back("Location", fmt::format("{}?{}", kViewerPage, viewer_query(view_only)));
    } else if (auto file = read_static_file(novnc_dir_, request.path); !file) {
        response = Response::error(file.error(), request.request_id);
    } else {
        response.body = std::move(file->body);
        response.headers.emplace_back("Content-Type", std::move(file->content_type));
    }
    add_page_headers(response);
    return response;
}

void DesktopViewer::bridge(http::WsChannel& channel, const std::string& sandbox_id, bool view_only,
                           const std::string& request_id) const {
    auto close_for = [&](const Error& error) { channel.close(ws_close_for(error)); };
    auto desktop = store_.get_desktop(sandbox_id);
    if (!desktop || !*desktop) {
        return close_for(desktop ? make_coded_error(api::code::kNotFound, "sandbox {} has no desktop", sandbox_id)
                                 : desktop.error());
    }
    // The session may be gone (a cold boot since): started again as it was;
    // one that runs answers at once. The agent runs one operation per connection.
    auto control = guest_.connect(sandbox_id);  // wakes a paused sandbox; holds its activity lease
    if (!control) {
        return close_for(control.error());
    }
    auto started = agent::desktop_start(**control, desktop_start_options(**desktop));
    if (!started) {
        return close_for(desktop_error(started.error()));
    }
    auto client = guest_.connect(sandbox_id);
    if (!client) {
        return close_for(client.error());
    }
    const std::uint16_t port = started->vnc_port != 0 ? started->vnc_port : (*desktop)->vnc_port;
    auto stream = agent::open_tcp(std::move(**client), "127.0.0.1", port);
    if (!stream) {
        return close_for(guest_error(stream.error()));
    }
    TcpFraming framing{.eof_messages = false};
    if (view_only) {
        framing.client_filter = [filter = std::make_shared<RfbViewOnlyFilter>()](std::string_view in,
                                                                                 std::string& out) {
            return filter->feed(in, out);
        };
    }
    relay_tcp(channel, std::move(stream->fd), std::move(stream->received), request_id, framing);
}

}  // namespace sbx::sbxd

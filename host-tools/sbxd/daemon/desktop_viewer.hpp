// A sandbox's desktop in a browser (docs/sbxd.md, "The desktop"): what
// sbxd serves at https://<subdomain>-desktop.<domain> and -view behind its
// HTTPS proxy, once the proxy has admitted a request by that link's token
// (hosted_backend.cpp hands each such connection over through a
// socketpair). The noVNC client's files come from Debian's novnc package
// as they are; its WebSocket (binary messages: the RFB stream) is carried
// to the guest's VNC server on 127.0.0.1 through the agent's connect_tcp,
// with no guest network and no websockify. A view-only link's input never
// reaches the server (rfb_filter.hpp), whatever the page was told.
#pragma once

#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "base/unique_fd.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"
#include "host-tools/sbxd/http/server.hpp"
#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

inline constexpr std::string_view kNovncDir = "/usr/share/novnc";
// The page and the WebSocket, as the links name them (noVNC's app/ui.js
// takes its settings from the query: the path of its WebSocket, connect at
// once, scale the screen to the window, and for a view-only link no input).
inline constexpr std::string_view kViewerPage = "/vnc.html";
inline constexpr std::string_view kBridgePath = "/websockify";
[[nodiscard]] std::string viewer_query(bool view_only);

class DesktopViewer {
public:
    // Requests run on a small pool of the viewer's own (files and
    // handshakes: short); each WebSocket on a stream thread of its server.
    DesktopViewer(boost::asio::io_context& io, Store& store, const GuestRoutes& guest,
                  std::string novnc_dir = std::string(kNovncDir));
    DesktopViewer(const DesktopViewer&) = delete;
    DesktopViewer& operator=(const DesktopViewer&) = delete;

    // One connection the proxy opened for an admitted link of the sandbox
    // (`view_only`: its view-only one), served until either side ends it.
    void serve(UniqueFd connection, const std::string& sandbox_id, bool view_only);

    // One request of such a connection: GET / redirects to the page, GET
    // /websockify is the WebSocket, any other GET a noVNC file (404 when
    // there is none); other methods 405.
    [[nodiscard]] http::Response handle(const http::Request& request, const std::string& sandbox_id,
                                        bool view_only) const;

private:
    // The WebSocket's handler: the VNC server's stream, started again when
    // the session is gone (a cold boot), relayed both ways.
    void bridge(http::WsChannel& channel, const std::string& sandbox_id, bool view_only,
                const std::string& request_id) const;

    Store& store_;
    const GuestRoutes& guest_;
    std::string novnc_dir_;
    boost::asio::thread_pool workers_{2};
    http::Server server_;
};

}  // namespace sbx::sbxd

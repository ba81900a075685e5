// What sbxd's HTTPS proxy (proxy/) asks of sbxd for a hosted port
// (docs/api.md, "Hosted ports"; product.md §4): which sandbox and port a
// Host names, and a connection to the app in it. A paused sandbox wakes
// first (GuestRoutes::hold/connect); the connection holds an activity
// lease while it lives, so the idle pause never pauses a sandbox under
// an open request; traffic moves lastActivityAt.
#pragma once

#include <memory>
#include <optional>

#include "host-tools/sbxd/daemon/desktop_viewer.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"
#include "host-tools/sbxd/daemon/lifecycle.hpp"
#include "host-tools/sbxd/net/address_pool.hpp"
#include "host-tools/sbxd/proxy/proxy.hpp"
#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

class HostedBackend final : public proxy::Backend {
public:
    HostedBackend(Store& store, const GuestRoutes& guest, std::optional<net::AddressPool> pool,
                  LifecycleScheduler* lifecycle)
        : store_(store), guest_(guest), pool_(std::move(pool)), lifecycle_(lifecycle) {}

    // Serves the desktops' links (<subdomain>-desktop and -view, the
    // proxy's services) with a DesktopViewer on `io`; without one they are
    // 404. Before the proxy starts.
    void serve_desktops(boost::asio::io_context& io) { viewer_ = std::make_shared<DesktopViewer>(io, store_, guest_); }

    Result<proxy::Target> lookup(std::string_view subdomain, std::uint16_t port) override;
    // A desktop link: its sandbox, and the token of that link (control or view only).
    Result<proxy::Target> lookup_service(std::string_view subdomain, std::string_view service) override;
    // --localhost: connect_tcp to 127.0.0.1 through the agent; otherwise a
    // TCP connection from the host to the guest's address on its tap. A
    // desktop link: one end of a socketpair whose other end the viewer
    // serves (its sandbox woken and leased first, as for a port).
    Result<proxy::Upstream> connect(const proxy::Target& target) override;
    void activity(const proxy::Target& target) override;

private:
    Store& store_;
    const GuestRoutes& guest_;
    std::optional<net::AddressPool> pool_;
    LifecycleScheduler* lifecycle_;
    std::shared_ptr<DesktopViewer> viewer_;
};

}  // namespace sbx::sbxd

// The /v1 API over the store and the sandbox driver (docs/api.md): one
// handle() per request, run on a worker thread. It authenticates (a TCP
// request needs a bearer key; the Unix socket's file permissions already
// decided who may connect), authorizes by the key's scope, routes, and
// turns every failure into the API's JSON error.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "guest-agent/desktop/desktop_client.hpp"
#include "host-tools/sbxd/api/sizes.hpp"
#include "host-tools/sbxd/daemon/admission.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"
#include "host-tools/sbxd/daemon/lifecycle.hpp"
#include "host-tools/sbxd/daemon/sandbox_driver.hpp"
#include "host-tools/sbxd/daemon/views.hpp"
#include "host-tools/sbxd/http/router.hpp"
#include "host-tools/sbxd/net/address_pool.hpp"
#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

// Where sbxd's HTTPS proxy serves hosted ports (docs/api.md, "Hosted ports").
struct ProxyInfo {
    std::string domain;           // URLs are https://<subdomain>-<port>.<domain>
    std::uint16_t url_port = 443;  // the port in URLs (omitted when 443)
};
// https://<subdomain>-<port>.<domain>[:url_port]/
[[nodiscard]] std::string hosted_url(const ProxyInfo& proxy, const HostedPortRecord& port);

struct DaemonInfo {
    std::string host_name;  // named in every sandbox (product.md §7)
    std::string version;
    std::string images_dir;
    api::HostLimits limits;
    // The shortest ttl a request may ask for (lower only in tests: sbxd
    // --min-ttl-seconds).
    std::int64_t min_ttl_seconds = api::kMinTtlSeconds;
    std::optional<net::AddressPool> net_pool{};  // none: sandboxes have no network
    std::optional<ProxyInfo> proxy{};  // none: no hosted ports
    std::string ca_pem{};  // sbxd's own CA (GET /v1/ca); empty with an operator's certificate
};

using Clock = std::function<UnixMillis()>;

// Wall-clock Unix milliseconds.
[[nodiscard]] UnixMillis system_now();

class ApiService {
public:
    // With `lifecycle`, a paused sandbox wakes on a guest request, guest
    // requests count as activity and hold leases, and every change that
    // can bring a deadline nearer re-arms its timer.
    ApiService(Store& store, SandboxDriver& driver, DaemonInfo info, Clock clock = system_now,
               LifecycleScheduler* lifecycle = nullptr);

    [[nodiscard]] http::Response handle(http::Request request) const;
    // The guest routes' wake-and-lease, for sbxd's other ways into a
    // sandbox (the hosted-port proxy, hosted_backend.hpp).
    [[nodiscard]] const GuestRoutes& guest() const { return guest_; }
    // The server's BodyPolicy: file uploads stream their bodies.
    [[nodiscard]] bool streams_body(const http::Request& request) const { return router_.streams_body(request); }
    // POST, GET and DELETE /mcp go to `handler` (mcp_endpoint.hpp) for any
    // caller that authenticated, scoped or not, read-only included: each
    // tool call is a request of its own under the key's rules. Called once,
    // before the server starts.
    void serve_mcp(http::Handler handler);
    static constexpr std::string_view kMcpPath = "/mcp";

private:
    using PathParams = http::PathParams;
    using Request = http::Request;
    using Response = http::Response;

    void add_routes();
    // Authentication (TCP), the read-only rule, then the router.
    [[nodiscard]] Response authorize_and_dispatch(Request& request) const;
    // A sandbox as the API shows it (views.hpp), with this host's name and pool.
    [[nodiscard]] nlohmann::json sandbox_view(const SandboxRecord& sandbox) const {
        return sandbox_json(sandbox, info_.host_name, info_.net_pool ? &*info_.net_pool : nullptr);
    }
    // The route runs only for host-wide callers / for callers whose scope
    // covers the sandbox named by the path's {id}; others get 403.
    void host_route(std::string_view method, std::string_view pattern,
                    Response (ApiService::*handler)(const Request&, const PathParams&) const);
    void sandbox_route(std::string_view method, std::string_view pattern,
                       Response (ApiService::*handler)(const Request&, const PathParams&) const);
    void sandbox_route(std::string_view method, std::string_view pattern, http::Handler handler,
                       http::BodyMode body);

    Response health(const Request& request, const PathParams& params) const;
    Response limits(const Request& request, const PathParams& params) const;
    Response list_sandboxes(const Request& request, const PathParams& params) const;
    Response create_sandbox(const Request& request, const PathParams& params) const;
    Response get_sandbox(const Request& request, const PathParams& params) const;
    Response delete_sandbox(const Request& request, const PathParams& params) const;
    Response delete_by_label(const Request& request, const PathParams& params) const;
    Response stop_sandbox(const Request& request, const PathParams& params) const;
    Response resume_sandbox(const Request& request, const PathParams& params) const;
    Response fork_sandbox(const Request& request, const PathParams& params) const;
    Response snapshot_sandbox(const Request& request, const PathParams& params) const;
    Response history(const Request& request, const PathParams& params) const;
    Response list_snapshots(const Request& request, const PathParams& params) const;
    Response get_snapshot(const Request& request, const PathParams& params) const;
    Response delete_snapshot(const Request& request, const PathParams& params) const;
    Response list_events(const Request& request, const PathParams& params) const;
    // key_routes.cpp
    Response create_key(const Request& request, const PathParams& params) const;
    Response list_keys(const Request& request, const PathParams& params) const;
    Response delete_key(const Request& request, const PathParams& params) const;
    // hosted_port_routes.cpp
    [[nodiscard]] nlohmann::json hosted_port_view(const HostedPortRecord& port) const;
    // {"hostedPorts":[...]} of one sandbox, or of all.
    Response hosted_ports_reply(const Request& request, const std::optional<std::string>& sandbox_id) const;
    Response host_port(const Request& request, const PathParams& params) const;
    Response list_sandbox_ports(const Request& request, const PathParams& params) const;
    Response list_ports(const Request& request, const PathParams& params) const;
    Response unhost_port(const Request& request, const PathParams& params) const;
    Response certificate_authority(const Request& request, const PathParams& params) const;
    // desktop_routes.cpp
    [[nodiscard]] nlohmann::json desktop_view(const agent::DesktopInfo& info,
                                              const std::optional<DesktopRecord>& desktop,
                                              const Request& request) const;
    Response start_desktop(const Request& request, const PathParams& params) const;
    Response get_desktop(const Request& request, const PathParams& params) const;
    Response desktop_action(const Request& request, const PathParams& params) const;
    Response desktop_screenshot(const Request& request, const PathParams& params) const;
    // log_routes.cpp
    Response sandbox_logs(const Request& request, const PathParams& params) const;
    // lifecycle_routes.cpp
    Response ttl_sandbox(const Request& request, const PathParams& params) const;
    Response idle_sandbox(const Request& request, const PathParams& params) const;
    // egress_routes.cpp
    Response egress_sandbox(const Request& request, const PathParams& params) const;
    Response change_settings(const Request& request, const std::string& id,
                           const std::function<Result<void>(const SandboxRecord&)>& change) const;
    // Resumes a paused sandbox for a request that needs its guest
    // (product.md §2, wake on request): admitted as any start; nothing for
    // a sandbox in another state.
    [[nodiscard]] Result<void> wake(const std::string& id) const;
    // A start (create, fork, a user's resume; not a wake) starts the
    // auto-stop again at its length: product.md §2, "1 h after start".
    [[nodiscard]] Result<SandboxRecord> restart_auto_stop(const SandboxRecord& sandbox) const;
    void reschedule() const;

    // What the store shows running, for admission (admission.hpp).
    [[nodiscard]] Result<Usage> usage() const;

    Store& store_;
    SandboxDriver& driver_;
    DaemonInfo info_;
    Clock clock_;
    UnixMillis started_at_;
    mutable Admission admission_;
    LifecycleScheduler* lifecycle_;
    mutable std::mutex wake_mutex_;  // one wake at a time; a request behind it finds the sandbox running
    GuestRoutes guest_;
    http::Router router_;
};

}  // namespace sbx::sbxd

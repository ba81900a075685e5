#include "host-tools/sbxd/daemon/hosted_backend.hpp"

#include <sys/socket.h>

#include "guest-agent/forward/forward_client.hpp"
#include "guest-agent/forward/tcp_socket.hpp"
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/daemon/desktop_requests.hpp"

namespace sbx::sbxd {

namespace {

// How long the proxy waits for the guest's app to accept, past a wake.
constexpr std::chrono::seconds kGuestConnectTimeout{10};

// The driver's and the store's codes as the proxy's (its error pages).
Error for_proxy(const Error& error) {
    const std::string& code = error.code;
    if (code == api::code::kNotFound) {
        return error.with_code("not_found");
    }
    if (code == api::code::kInvalidState) {
        return error.with_code("conflict");
    }
    if (code == api::code::kAgentUnavailable || code == "connect_failed") {
        return error.with_code("connect_failed");
    }
    return error.with_code("unavailable");
}

}  // namespace

Result<proxy::Target> HostedBackend::lookup(std::string_view subdomain, std::uint16_t port) {
    auto found = store_.find_hosted_port(subdomain, port);
    if (!found) {
        return for_proxy(found.error());
    }
    return proxy::Target{found->sandbox_id, found->port, found->is_public, found->token, found->localhost};
}

Result<proxy::Target> HostedBackend::lookup_service(std::string_view subdomain, std::string_view service) {
    if (!viewer_ || (service != kDesktopService && service != kViewService)) {
        return make_coded_error("not_found", "nothing is served at {}-{}", subdomain, service);
    }
    auto found = store_.find_desktop(subdomain);
    if (!found) {
        return for_proxy(found.error());
    }
    const bool view_only = service == kViewService;
    return proxy::Target{found->sandbox_id, 0, false, view_only ? found->view_token : found->token, false,
                         std::string(service)};
}

Result<proxy::Upstream> HostedBackend::connect(const proxy::Target& target) {
    if (!target.service.empty()) {
        if (!viewer_) {
            return make_coded_error("not_found", "no desktop viewer");
        }
        auto lease = guest_.hold(target.sandbox_id);
        if (!lease) {
            return for_proxy(lease.error());
        }
        int fds[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
            return sys_error("a socketpair for the desktop viewer").with_code("unavailable");
        }
        viewer_->serve(UniqueFd(fds[0]), target.sandbox_id, target.service == kViewService);
        return proxy::Upstream{UniqueFd(fds[1]), {}, std::move(*lease)};
    }
    if (target.guest_loopback) {
        auto client = guest_.connect(target.sandbox_id);
        if (!client) {
            return for_proxy(client.error());
        }
        auto stream = agent::open_tcp(std::move(**client), "127.0.0.1", target.port);
        if (!stream) {
            return for_proxy(stream.error());
        }
        return proxy::Upstream{std::move(stream->fd), std::move(stream->received), std::move(*client)};
    }
    auto lease = guest_.hold(target.sandbox_id);
    if (!lease) {
        return for_proxy(lease.error());
    }
    auto sandbox = store_.get_sandbox(target.sandbox_id);
    if (!sandbox) {
        return for_proxy(sandbox.error());
    }
    if (!pool_ || !sandbox->network) {
        return make_coded_error("unavailable", "sandbox {} has no network", target.sandbox_id);
    }
    auto address = net::address_of(*pool_, sandbox->network->slot);
    if (!address) {
        return for_proxy(address.error());
    }
    auto tcp = agent::parse_tcp_address(net::format_ipv4(address->guest), target.port);
    if (!tcp) {
        return for_proxy(tcp.error());
    }
    auto fd = agent::connect_tcp(*tcp, kGuestConnectTimeout);
    if (!fd) {
        return Error{fmt::format("nothing answers at {} in sandbox {}: {}", tcp->text, target.sandbox_id,
                                 fd.error().to_string()),
                     0, std::string("connect_failed")};
    }
    return proxy::Upstream{std::move(*fd), {}, std::move(*lease)};
}

void HostedBackend::activity(const proxy::Target& target) {
    if (lifecycle_ != nullptr) {
        lifecycle_->touch(target.sandbox_id);
    }
}

}  // namespace sbx::sbxd

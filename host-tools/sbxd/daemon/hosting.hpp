// sbxd's hosted-port proxy from its flags (docs/sbxd.md, "Hosted ports"):
// where it listens, the domain of its URLs, and its certificate — the
// operator's (--proxy-cert, --proxy-key) or one issued at each start by
// sbxd's own CA in STATE_DIR/ca (docs/sbxd.md, "Certificates").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/hosted_backend.hpp"
#include "host-tools/sbxd/proxy/proxy.hpp"

namespace sbx::sbxd {

struct HostingOptions {
    std::string listen = "tcp:127.0.0.1:8443";  // "off": no hosted ports
    std::string domain = "sbx.localhost";
    std::string cert_path, key_path;  // PEM files; both or neither
    std::uint16_t url_port = 0;       // the port in URLs; 0: the listen port
};

struct HostingPlan {
    std::string listen;
    ProxyInfo info;       // for DaemonInfo::proxy
    std::string ca_pem;   // sbxd's CA (DaemonInfo::ca_pem); empty with the operator's certificate
    proxy::ProxyConfig proxy;
};

// Checks the flags and gets the certificate, before anything starts;
// none for --proxy-listen off. Codes: invalid_argument, and the CA's.
[[nodiscard]] Result<std::optional<HostingPlan>> plan_hosting(const HostingOptions& options,
                                                              const std::string& state_dir);

// The proxy, listening, with the desktops' links served by `backend`.
[[nodiscard]] Result<proxy::Proxy> start_hosting(boost::asio::io_context& io, const HostingPlan& plan,
                                                 std::shared_ptr<HostedBackend> backend);

}  // namespace sbx::sbxd

#include "host-tools/sbxd/daemon/hosting.hpp"

#include <fstream>
#include <sstream>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/crypto/certificate_authority.hpp"
#include "host-tools/sbxd/daemon/desktop_requests.hpp"
#include "host-tools/sbxd/http/server.hpp"

namespace sbx::sbxd {

namespace {

Result<std::string> read_pem(const std::string& path, std::string_view flag) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return make_coded_error(api::code::kInvalidArgument, "{} {}: cannot read it", flag, path);
    }
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

Result<std::optional<HostingPlan>> plan_hosting(const HostingOptions& options, const std::string& state_dir) {
    if (options.listen == "off") {
        return std::optional<HostingPlan>();
    }
    auto address = http::parse_listen_address(options.listen);
    if (!address || address->transport != http::Transport::Tcp) {
        return make_coded_error(api::code::kInvalidArgument, "--proxy-listen '{}': want tcp:HOST:PORT or off",
                                options.listen);
    }
    if (address->port == 0) {
        return make_coded_error(api::code::kInvalidArgument,
                                "--proxy-listen '{}': the port is in every URL, so it cannot be 0", options.listen);
    }
    if (options.cert_path.empty() != options.key_path.empty()) {
        return make_coded_error(api::code::kInvalidArgument, "--proxy-cert and --proxy-key go together");
    }
    HostingPlan plan;
    plan.listen = options.listen;
    plan.info = ProxyInfo{options.domain, options.url_port != 0 ? options.url_port : address->port};
    plan.proxy.domain = options.domain;
    plan.proxy.services = {std::string(kDesktopService), std::string(kViewService)};
    if (!options.cert_path.empty()) {
        auto chain = read_pem(options.cert_path, "--proxy-cert");
        auto key = read_pem(options.key_path, "--proxy-key");
        if (!chain || !key) {
            return !chain ? chain.error() : key.error();
        }
        plan.proxy.cert_chain_pem = std::move(*chain);
        plan.proxy.private_key_pem = std::move(*key);
        return std::optional<HostingPlan>(std::move(plan));
    }
    auto ca = CertificateAuthority::open_or_create(state_dir + "/ca");
    if (!ca) {
        return ca.error();
    }
    auto issued = ca->issue_server({"*." + options.domain, options.domain}, CertificateAuthority::kMaxServerValidity);
    if (!issued) {
        return issued.error();
    }
    plan.ca_pem = ca->ca_pem();
    plan.proxy.cert_chain_pem = std::move(issued->chain_pem);
    plan.proxy.private_key_pem = std::move(issued->key_pem);
    return std::optional<HostingPlan>(std::move(plan));
}

Result<proxy::Proxy> start_hosting(boost::asio::io_context& io, const HostingPlan& plan,
                                   std::shared_ptr<HostedBackend> backend) {
    backend->serve_desktops(io);
    auto started = proxy::Proxy::start(io, plan.proxy, std::move(backend));
    if (!started) {
        return started.error();
    }
    if (auto bound = started->listen(plan.listen); !bound) {
        return bound.error();
    }
    return std::move(*started);
}

}  // namespace sbx::sbxd

// Hosted ports (docs/api.md, "Hosted ports"; product.md §4): a sandbox's
// port served at https://<subdomain>-<port>.<domain> by sbxd's proxy
// (proxy/), private unless made public; and the certificate of sbxd's own
// CA, for clients to trust. The proxy finds what a request's Host names
// through the store (hosted_backend.cpp).
#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"

namespace sbx::sbxd {

namespace {

using http::Request;
using http::Response;

struct HostRequest {
    std::uint16_t port = 0;
    bool is_public = false;
    bool localhost = false;
};

Result<HostRequest> parse_host_request(std::string_view body) {
    auto json = api::parse_body(body);
    if (!json) {
        return json.error();
    }
    api::Fields fields(*json);
    auto port = fields.integer("port", 1, 65535);
    if (!port) {
        return port.error();
    }
    if (!*port) {
        return api::invalid_argument("port is required");
    }
    auto is_public = fields.boolean("public");
    if (!is_public) {
        return is_public.error();
    }
    auto localhost = fields.boolean("localhost");
    if (!localhost) {
        return localhost.error();
    }
    if (auto r = fields.finish(); !r) {
        return r.error();
    }
    return HostRequest{static_cast<std::uint16_t>(**port), is_public->value_or(false), localhost->value_or(false)};
}

Result<std::uint16_t> path_port(const std::string& text) {
    std::uint32_t port = 0;
    if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos ||
        (port = static_cast<std::uint32_t>(std::stoul(text))) == 0 || port > 65535) {
        return api::invalid_argument(fmt::format("'{}' is not a port (1-65535)", text));
    }
    return static_cast<std::uint16_t>(port);
}

Error hosting_off() {
    return make_coded_error(api::code::kInvalidState, "this sbxd serves no hosted ports (started with --proxy-listen off)");
}

}  // namespace

std::string hosted_url(const ProxyInfo& proxy, const HostedPortRecord& port) {
    std::string url = fmt::format("https://{}-{}.{}", port.subdomain, port.port, proxy.domain);
    if (proxy.url_port != 443) {
        url += fmt::format(":{}", proxy.url_port);
    }
    return url + "/";
}

nlohmann::json ApiService::hosted_port_view(const HostedPortRecord& port) const {
    nlohmann::json view = {
        {"sandboxId", port.sandbox_id}, {"port", port.port},           {"public", port.is_public},
        {"localhost", port.localhost},  {"createdAt", rfc3339(port.created_at)},
    };
    if (info_.proxy) {
        std::string url = hosted_url(*info_.proxy, port);
        view["url"] = url;
        if (!port.is_public) {
            view["token"] = port.token;
            view["tokenUrl"] = url + "?_token=" + port.token;
        }
    }
    return view;
}

Response ApiService::host_port(const Request& request, const PathParams& params) const {
    if (!info_.proxy) {
        return Response::error(hosting_off(), request.request_id);
    }
    auto parsed = parse_host_request(request.body);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    if (sandbox->state == SandboxState::Deleting) {
        return Response::error(make_coded_error(api::code::kInvalidState, "sandbox {} is being deleted", sandbox->id),
                               request.request_id);
    }
    if (!parsed->localhost && !sandbox->network) {
        return Response::error(
            api::invalid_argument(fmt::format("sandbox {} has no network: host the port with localhost", sandbox->id)),
            request.request_id);
    }
    auto subdomain = random_hex(5);
    auto token = random_hex(16);
    if (!subdomain || !token) {
        return Response::error(!subdomain ? subdomain.error() : token.error(), request.request_id);
    }
    auto hosted = store_.host_port(HostedPortRecord{
        .sandbox_id = sandbox->id,
        .port = parsed->port,
        .subdomain = *subdomain,
        .token = *token,
        .is_public = parsed->is_public,
        .localhost = parsed->localhost,
        .created_at = clock_(),
    });
    if (!hosted) {
        return Response::error(hosted.error(), request.request_id);
    }
    return Response::ok({{"hostedPort", hosted_port_view(*hosted)}}, request.request_id);
}

Response ApiService::hosted_ports_reply(const Request& request, const std::optional<std::string>& sandbox_id) const {
    auto ports = store_.list_hosted_ports(sandbox_id);
    if (!ports) {
        return Response::error(ports.error(), request.request_id);
    }
    auto list = nlohmann::json::array();
    for (const auto& port : *ports) {
        list.push_back(hosted_port_view(port));
    }
    return Response::ok({{"hostedPorts", list}}, request.request_id);
}

Response ApiService::list_sandbox_ports(const Request& request, const PathParams& params) const {
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    return hosted_ports_reply(request, sandbox->id);
}

Response ApiService::list_ports(const Request& request, const PathParams&) const {
    return hosted_ports_reply(request, std::nullopt);
}

Response ApiService::unhost_port(const Request& request, const PathParams& params) const {
    auto port = path_port(params.at("port"));
    if (!port) {
        return Response::error(port.error(), request.request_id);
    }
    if (auto sandbox = store_.get_sandbox(params.at("id")); !sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    if (auto removed = store_.unhost_port(params.at("id"), *port); !removed) {
        return Response::error(removed.error(), request.request_id);
    }
    return Response::ok({{"unhosted", *port}}, request.request_id);
}

Response ApiService::certificate_authority(const Request& request, const PathParams&) const {
    if (info_.ca_pem.empty()) {
        return Response::error(
            make_coded_error(api::code::kNotFound, "this sbxd has no CA of its own (it serves an operator's certificate, or no hosted ports)"),
            request.request_id);
    }
    return Response::ok({{"certificate", info_.ca_pem}}, request.request_id);
}

}  // namespace sbx::sbxd

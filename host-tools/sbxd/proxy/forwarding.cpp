#include "host-tools/sbxd/proxy/forwarding.hpp"

#include <string>
#include <vector>

#include <boost/beast/core/string.hpp>

namespace sbx::sbxd::proxy {

namespace bhttp = boost::beast::http;
using boost::beast::iequals;

namespace {

std::string_view trim(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
        text.remove_prefix(1);
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
        text.remove_suffix(1);
    }
    return text;
}

bool is_framing(std::string_view name) {
    return iequals(name, "host") || iequals(name, "content-length") || iequals(name, "transfer-encoding");
}

}  // namespace

void strip_hop_by_hop(bhttp::fields& headers) {
    std::vector<std::string> named;
    for (auto [it, end] = headers.equal_range(bhttp::field::connection); it != end; ++it) {
        const auto& field = *it;
        std::string_view list = field.value();
        while (!list.empty()) {
            auto comma = list.find(',');
            std::string_view token = trim(list.substr(0, comma));
            if (!token.empty() && !is_framing(token)) {
                named.emplace_back(token);
            }
            list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
        }
    }
    for (const auto& name : named) {
        headers.erase(name);
    }
    for (auto field : {bhttp::field::connection, bhttp::field::keep_alive, bhttp::field::proxy_connection,
                       bhttp::field::proxy_authorization, bhttp::field::te, bhttp::field::trailer,
                       bhttp::field::upgrade}) {
        headers.erase(field);
    }
}

void add_forwarded_fields(bhttp::fields& headers, std::string_view client_ip, std::string_view host) {
    std::string chain;
    for (auto [it, end] = headers.equal_range("X-Forwarded-For"); it != end; ++it) {
        const auto& field = *it;
        std::string_view value = trim(field.value());
        if (!value.empty()) {
            chain += chain.empty() ? "" : ", ";
            chain += value;
        }
    }
    chain += chain.empty() ? "" : ", ";
    chain += client_ip;
    headers.set("X-Forwarded-For", chain);
    headers.set("X-Forwarded-Proto", "https");
    headers.set("X-Forwarded-Host", host);
}

}  // namespace sbx::sbxd::proxy

#include "host-tools/sbxd/proxy/host_name.hpp"

#include <algorithm>
#include <charconv>

namespace sbx::sbxd::proxy {

namespace {

constexpr std::size_t kMaxLabel = 63;

char lower(char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool is_label_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

// One lower-case label: [a-z0-9] with inner '-'.
bool is_label(std::string_view label) {
    return !label.empty() && label.size() <= kMaxLabel && label.front() != '-' && label.back() != '-' &&
           std::all_of(label.begin(), label.end(), is_label_char);
}

std::string to_lower(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), lower);
    return out;
}

}  // namespace

bool is_valid_domain(std::string_view domain) {
    if (domain.empty() || domain.size() > 253) {
        return false;
    }
    std::string lowered = to_lower(domain);
    std::string_view rest = lowered;
    while (true) {
        auto dot = rest.find('.');
        if (!is_label(rest.substr(0, dot))) {
            return false;
        }
        if (dot == std::string_view::npos) {
            return true;
        }
        rest = rest.substr(dot + 1);
    }
}

std::optional<HostedName> parse_hosted_name(std::string_view host, std::string_view domain,
                                            std::span<const std::string> services) {
    // The port after the name, if any: digits only (a name has no ':').
    if (auto colon = host.find(':'); colon != std::string_view::npos) {
        std::string_view port = host.substr(colon + 1);
        if (port.empty() || port.size() > 5 ||
            !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            return std::nullopt;
        }
        host = host.substr(0, colon);
    }
    std::string name = to_lower(host);
    std::string suffix = "." + to_lower(domain);
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        return std::nullopt;
    }
    std::string_view label = std::string_view(name).substr(0, name.size() - suffix.size());
    if (!is_label(label)) {
        return std::nullopt;  // also a name with more labels before the domain
    }
    auto hyphen = label.rfind('-');
    if (hyphen == std::string_view::npos) {
        return std::nullopt;
    }
    std::string_view subdomain = label.substr(0, hyphen);
    std::string_view port_text = label.substr(hyphen + 1);
    if (is_label(subdomain) && std::find(services.begin(), services.end(), port_text) != services.end()) {
        return HostedName{std::string(subdomain), 0, std::string(port_text)};
    }
    if (!is_label(subdomain) || port_text.empty() || port_text.size() > 5 || port_text.front() == '0') {
        return std::nullopt;
    }
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535) {
        return std::nullopt;
    }
    return HostedName{std::string(subdomain), static_cast<std::uint16_t>(port)};
}

}  // namespace sbx::sbxd::proxy

// Host names of hosted ports: `<subdomain>-<port>.<domain>`, where the
// first label (RFC 1035 §2.3.1: letters, digits and inner hyphens, at most
// 63 octets, §2.3.4) splits at its last '-' into the sandbox's subdomain
// and a port 1-65535, or one of the backend's service words in its place
// (sbxd: `desktop`, `view`). Host names compare without case (RFC 4343).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sbx::sbxd::proxy {

struct HostedName {
    std::string subdomain;  // lower case
    std::uint16_t port = 0;  // 0 for a service
    std::string service{};   // one of `services`, or "" for a port
};

// Whether `domain` is a usable domain: dot-separated labels as above, no
// trailing dot.
[[nodiscard]] bool is_valid_domain(std::string_view domain);

// The name a Host header value (RFC 9110 §7.2: host [":" port]) points
// at, or nullopt when it is not one of ours.
// `services`: words (lower-case labels that are not numbers) that may
// stand where the port does.
[[nodiscard]] std::optional<HostedName> parse_hosted_name(std::string_view host, std::string_view domain,
                                                          std::span<const std::string> services = {});

}  // namespace sbx::sbxd::proxy

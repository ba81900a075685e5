// The DNS names sbxd puts in a certificate's subjectAltName (RFC 5280
// §4.2.1.6 dNSName): host names in the preferred syntax (RFC 1034 §3.5,
// with RFC 1123 §2.1's leading digit), optionally "*." and a name of two
// labels or more (a wildcard as the whole first label only, RFC 6125
// §6.4.3 and §7.2).
#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd {

// NAME lowercased when it is such a name; invalid_argument saying why
// otherwise (no trailing dot, no IP addresses, at most 253 characters).
[[nodiscard]] Result<std::string> normalize_certificate_dns_name(std::string_view name);

}  // namespace sbx::sbxd

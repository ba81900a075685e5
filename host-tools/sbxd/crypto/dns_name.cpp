#include "host-tools/sbxd/crypto/dns_name.hpp"

#include <algorithm>
#include <cctype>

namespace sbx::sbxd {

namespace {

// Text from a request, safe to put in a message.
std::string printable(std::string_view text) {
    std::string out;
    for (char c : text.substr(0, 80)) {
        out.push_back(std::isprint(static_cast<unsigned char>(c)) != 0 ? c : '?');
    }
    return text.size() > 80 ? out + "..." : out;
}

}  // namespace

Result<std::string> normalize_certificate_dns_name(std::string_view name) {
    auto refuse = [&](std::string_view why) {
        return make_coded_error("invalid_argument", "DNS name '{}' {}", printable(name), why);
    };
    if (name.empty()) {
        return make_coded_error("invalid_argument", "a DNS name is empty");
    }
    if (name.size() > 253) {  // RFC 1035 §2.3.4, without the root's dot
        return refuse("is longer than 253 characters");
    }
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view rest = lower;
    const bool wildcard = rest.substr(0, 2) == "*.";
    if (wildcard) {
        rest.remove_prefix(2);
    }
    std::size_t labels = 0;
    bool all_digits_last = false;
    for (std::size_t start = 0; start <= rest.size();) {
        const std::size_t dot = std::min(rest.find('.', start), rest.size());
        const std::string_view label = rest.substr(start, dot - start);
        if (label.empty()) {
            return refuse("has an empty label");
        }
        if (label.size() > 63) {
            return refuse("has a label longer than 63 characters");
        }
        if (label.find('*') != std::string_view::npos) {
            return refuse("has a wildcard other than a whole first label");
        }
        // RFC 1034 §3.5 letters, digits and hyphens, RFC 1123 §2.1 a digit first.
        if (!std::all_of(label.begin(), label.end(), [](char c) {
                return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
            })) {
            return refuse("has a character other than a letter, digit, hyphen or dot");
        }
        if (label.front() == '-' || label.back() == '-') {
            return refuse("has a label that starts or ends with a hyphen");
        }
        all_digits_last = std::all_of(label.begin(), label.end(), [](char c) { return c >= '0' && c <= '9'; });
        ++labels;
        start = dot + 1;
    }
    if (all_digits_last) {
        return refuse("ends in a numeric label (an IP address is not a DNS name)");
    }
    if (wildcard && labels < 2) {  // RFC 6125 §7.2: no wildcard right under a top-level label
        return refuse("is a wildcard under a single label");
    }
    return lower;
}

}  // namespace sbx::sbxd

#include "guest-agent/identity/hostname_fields.hpp"

#include <vector>

namespace sbx::agent {
namespace {

constexpr std::size_t kMaxLabelBytes = 63;  // RFC 1035 §2.3.4, kept by RFC 1123 §2.1

bool is_letter_or_digit(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The line's first field (its address), without leading blanks.
std::string_view first_field(std::string_view line) {
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string_view::npos) {
        return {};
    }
    line.remove_prefix(start);
    return line.substr(0, line.find_first_of(" \t#"));
}

std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> lines;
    while (!text.empty()) {
        const auto end = text.find('\n');
        lines.push_back(text.substr(0, end));
        text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    }
    return lines;
}

}  // namespace

Result<std::string> check_hostname(std::string_view text) {
    if (text.empty()) {
        return make_error("\"hostname\" is empty");
    }
    if (text.size() > kMaxHostnameBytes) {
        return make_error("\"hostname\" is {} bytes, more than the kernel's {} (HOST_NAME_MAX)", text.size(),
                          kMaxHostnameBytes);
    }
    std::size_t label_start = 0;
    for (std::size_t i = 0; i <= text.size(); ++i) {
        if (i < text.size() && text[i] != '.') {
            const char c = text[i];
            if (!is_letter_or_digit(c) && c != '-') {
                return make_error(
                    "\"hostname\" may hold only letters, digits, hyphens and dots (RFC 1123 §2.1): bad "
                    "character at {}",
                    i);
            }
            continue;
        }
        const std::string_view label = text.substr(label_start, i - label_start);
        if (label.empty()) {
            return make_error("\"hostname\" has an empty label at {} (RFC 1123 §2.1)", label_start);
        }
        if (label.size() > kMaxLabelBytes) {
            return make_error("\"hostname\" has a label of {} bytes at {}, more than 63 (RFC 1123 §2.1)",
                              label.size(), label_start);
        }
        if (label.front() == '-' || label.back() == '-') {
            return make_error(
                "\"hostname\" has a label that starts or ends with a hyphen at {} (RFC 1123 §2.1)",
                label_start);
        }
        label_start = i + 1;
    }
    return std::string(text);
}

std::string hosts_with_hostname(std::string_view hosts, std::string_view name) {
    const std::string own = std::string(kOwnHostAddress) + "\t" + std::string(name);
    const std::vector<std::string_view> lines = split_lines(hosts);
    bool placed = false;
    for (auto line : lines) {
        placed = placed || first_field(line) == kOwnHostAddress;
    }
    std::string out;
    if (!placed) {
        // After the first 127.0.0.1 line, else first.
        bool loopback_seen = false;
        for (auto line : lines) {
            loopback_seen = loopback_seen || first_field(line) == "127.0.0.1";
        }
        if (!loopback_seen) {
            out += own + "\n";
            placed = true;
        }
    }
    bool own_written = false;
    for (auto line : lines) {
        const std::string_view address = first_field(line);
        if (address == kOwnHostAddress) {
            if (!own_written) {
                out += own + "\n";
                own_written = true;
            }
            continue;
        }
        out += line;
        out += '\n';
        if (!placed && address == "127.0.0.1") {
            out += own + "\n";
            placed = true;
        }
    }
    return out;
}

}  // namespace sbx::agent

#include "guest-agent/identity/identity_fields.hpp"

namespace sbx::agent {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

}  // namespace

std::string MacAddress::to_string() const {
    return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", bytes[0], bytes[1], bytes[2], bytes[3],
                       bytes[4], bytes[5]);
}

Result<MacAddress> parse_mac(std::string_view text) {
    constexpr std::size_t kLength = 17;  // 6 × 2 digits + 5 colons
    auto refuse = [&](std::string_view why) {
        return make_error("\"mac\" must be six hex octets like \"52:54:00:12:34:56\" ({})", why);
    };
    if (text.size() != kLength) {
        return refuse("wrong length");
    }
    MacAddress mac;
    for (std::size_t i = 0; i < mac.bytes.size(); ++i) {
        const std::size_t at = i * 3;
        int high = hex_value(text[at]);
        int low = hex_value(text[at + 1]);
        if (high < 0 || low < 0 || (i + 1 < mac.bytes.size() && text[at + 2] != ':')) {
            return refuse("not hex octets separated by ':'");
        }
        mac.bytes[i] = static_cast<std::uint8_t>(high << 4 | low);
    }
    if ((mac.bytes[0] & 1) != 0) {
        return refuse("a multicast address cannot be an interface's address");
    }
    if (mac == MacAddress{}) {
        return refuse("all zeros");
    }
    return mac;
}

Result<std::vector<std::uint8_t>> parse_seed_hex(std::string_view text) {
    if (text.size() % 2 != 0) {
        return make_error("\"seed\" must be hex digits, two per byte (odd length {})", text.size());
    }
    const std::size_t bytes = text.size() / 2;
    if (bytes < kMinSeedBytes || bytes > kMaxSeedBytes) {
        return make_error("\"seed\" must be {} to {} bytes, got {}", kMinSeedBytes, kMaxSeedBytes, bytes);
    }
    std::vector<std::uint8_t> seed(bytes);
    for (std::size_t i = 0; i < bytes; ++i) {
        int high = hex_value(text[2 * i]);
        int low = hex_value(text[2 * i + 1]);
        if (high < 0 || low < 0) {
            return make_error("\"seed\" must be hex digits (bad character at {})",
                              high < 0 ? 2 * i : 2 * i + 1);
        }
        seed[i] = static_cast<std::uint8_t>(high << 4 | low);
    }
    return seed;
}

Result<std::string> check_token(std::string_view text) {
    if (text.size() < kMinTokenDigits || text.size() > kMaxTokenDigits) {
        return make_error("\"token\" must be {} to {} hex digits, got {}", kMinTokenDigits, kMaxTokenDigits,
                          text.size());
    }
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return make_error("\"token\" must be lower-case hex digits (bad character at {})", i);
        }
    }
    return std::string(text);
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (std::uint8_t b : bytes) {
        out.push_back(kDigits[b >> 4]);
        out.push_back(kDigits[b & 0xf]);
    }
    return out;
}

}  // namespace sbx::agent

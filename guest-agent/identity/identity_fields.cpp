#include "guest-agent/identity/identity_fields.hpp"

#include "base/hex.hpp"

namespace sbx::agent {
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
        int high = hex_digit_value(text[2 * i]);
        int low = hex_digit_value(text[2 * i + 1]);
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

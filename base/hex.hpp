// Hex digits as the text formats of the project spell them (MAC addresses,
// seeds, tokens).
#pragma once

namespace sbx {

// 0-15 for '0'-'9', 'a'-'f', 'A'-'F'; -1 for anything else.
[[nodiscard]] constexpr int hex_digit_value(char c) {
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

}  // namespace sbx

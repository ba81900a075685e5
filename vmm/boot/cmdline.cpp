#include "vmm/boot/cmdline.hpp"

namespace sbx::boot {

namespace {

// Printable ASCII, space included ([0x20, 0x7e]).
bool is_printable(char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte >= 0x20 && byte <= 0x7e;
}

Result<void> check_printable(std::string_view text, std::string_view what) {
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\0') {
            return make_error("{} contains a NUL byte at offset {}", what, i);
        }
        if (!is_printable(text[i])) {
            return make_error("{} contains non-printable byte {:#04x} at offset {}", what,
                              static_cast<unsigned char>(text[i]), i);
        }
    }
    return ok();
}

}  // namespace

Result<void> Cmdline::append(std::string_view text) {
    if (auto r = check_printable(text, "command line text"); !r) {
        return r;
    }
    if (text.empty()) {
        return ok();
    }
    const std::size_t separator = text_.empty() ? 0 : 1;
    // Bytes needed: what is there, the separator, the text and the NUL.
    // Compared by subtraction so no sum can overflow.
    const std::size_t used = text_.size() + separator + 1;
    if (used > capacity_ || text.size() > capacity_ - used) {
        return make_error("command line would be {} bytes with its NUL, over the {}-byte limit",
                          text_.size() + separator + text.size() + 1, capacity_);
    }
    if (separator != 0) {
        text_.push_back(' ');
    }
    text_.append(text);
    return ok();
}

Result<void> Cmdline::insert(std::string_view key, std::string_view value) {
    if (key.empty()) {
        return make_error("command line key is empty");
    }
    if (auto r = check_printable(key, "command line key"); !r) {
        return r;
    }
    if (key.find_first_of(" =\"") != std::string_view::npos) {
        return make_error("command line key '{}' contains a space, '=' or '\"'", key);
    }
    if (auto r = check_printable(value, "command line value"); !r) {
        return r;
    }
    if (value.find('"') != std::string_view::npos) {
        return make_error("command line value for '{}' contains '\"'", key);
    }
    std::string pair;
    pair.reserve(key.size() + value.size() + 3);
    pair.append(key);
    pair.push_back('=');
    const bool quote = value.find(' ') != std::string_view::npos;
    if (quote) {
        pair.push_back('"');
    }
    pair.append(value);
    if (quote) {
        pair.push_back('"');
    }
    return append(pair);
}

}  // namespace sbx::boot

#include "guest-agent/client/reply_fields.hpp"

namespace sbx::agent {

namespace {

constexpr std::size_t kMaxCodeLength = 64;

// The field, or nullptr when it is missing or null (or `reply` is no object).
const Json* field(const Json& reply, std::string_view key) {
    if (!reply.is_object()) {
        return nullptr;
    }
    auto it = reply.find(key);
    return it == reply.end() || it->is_null() ? nullptr : &*it;
}

Error missing(std::string_view key) { return malformed_reply(fmt::format("\"{}\" is missing", key)); }

Error wrong(std::string_view key, std::string_view expected) {
    return malformed_reply(fmt::format("\"{}\" is not {}", key, expected));
}

bool is_code(std::string_view code) {
    if (code.empty() || code.size() > kMaxCodeLength) {
        return false;
    }
    for (char c : code) {
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
            return false;
        }
    }
    return true;
}

}  // namespace

Error malformed_reply(std::string_view what) { return make_error("malformed reply from the agent: {}", what); }

Result<std::optional<std::string>> reply_optional_string(const Json& reply, std::string_view key) {
    const Json* v = field(reply, key);
    if (v == nullptr) {
        return std::optional<std::string>();
    }
    if (!v->is_string()) {
        return wrong(key, "a string");
    }
    return std::optional<std::string>(v->get<std::string>());
}

Result<std::optional<std::uint64_t>> reply_optional_u64(const Json& reply, std::string_view key,
                                                        std::uint64_t max) {
    const Json* v = field(reply, key);
    if (v == nullptr) {
        return std::optional<std::uint64_t>();
    }
    // Parsed non-negative integers are unsigned, negative ones (and those
    // built from a C++ int) number_integer; floats are wrong here.
    const bool non_negative =
        v->is_number_unsigned() || (v->is_number_integer() && v->get<std::int64_t>() >= 0);
    if (!non_negative || v->get<std::uint64_t>() > max) {
        return wrong(key, fmt::format("an integer from 0 to {}", max));
    }
    return std::optional<std::uint64_t>(v->get<std::uint64_t>());
}

Result<std::optional<std::int64_t>> reply_optional_i64(const Json& reply, std::string_view key, std::int64_t min,
                                                       std::int64_t max) {
    const Json* v = field(reply, key);
    if (v == nullptr) {
        return std::optional<std::int64_t>();
    }
    bool in_range = false;
    std::int64_t value = 0;
    if (v->is_number_unsigned()) {
        const auto u = v->get<std::uint64_t>();
        in_range = u <= static_cast<std::uint64_t>(INT64_MAX) && static_cast<std::int64_t>(u) <= max &&
                   static_cast<std::int64_t>(u) >= min;
        value = static_cast<std::int64_t>(u);
    } else if (v->is_number_integer()) {
        value = v->get<std::int64_t>();
        in_range = value >= min && value <= max;
    }
    if (!in_range) {
        return wrong(key, fmt::format("an integer from {} to {}", min, max));
    }
    return std::optional<std::int64_t>(value);
}

Result<std::optional<bool>> reply_optional_bool(const Json& reply, std::string_view key) {
    const Json* v = field(reply, key);
    if (v == nullptr) {
        return std::optional<bool>();
    }
    if (!v->is_boolean()) {
        return wrong(key, "true or false");
    }
    return std::optional<bool>(v->get<bool>());
}

Result<std::string> reply_string(const Json& reply, std::string_view key) {
    auto v = reply_optional_string(reply, key);
    if (!v) {
        return v.error();
    }
    if (!*v) {
        return missing(key);
    }
    return std::move(**v);
}

Result<std::uint64_t> reply_u64(const Json& reply, std::string_view key, std::uint64_t max) {
    auto v = reply_optional_u64(reply, key, max);
    if (!v) {
        return v.error();
    }
    if (!*v) {
        return missing(key);
    }
    return **v;
}

Result<std::int64_t> reply_i64(const Json& reply, std::string_view key, std::int64_t min, std::int64_t max) {
    auto v = reply_optional_i64(reply, key, min, max);
    if (!v) {
        return v.error();
    }
    if (!*v) {
        return missing(key);
    }
    return **v;
}

Result<bool> reply_bool(const Json& reply, std::string_view key) {
    auto v = reply_optional_bool(reply, key);
    if (!v) {
        return v.error();
    }
    if (!*v) {
        return missing(key);
    }
    return **v;
}

std::string reply_type(const Json& reply) {
    const Json* v = field(reply, "type");
    return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

std::string printable(std::string_view text, std::size_t max) {
    std::string out(text.substr(0, max));
    for (char& c : out) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
            c = '?';
        }
    }
    return out;
}

Error agent_error(const Json& error_message) {
    auto code = reply_optional_string(error_message, "code");
    auto text = reply_optional_string(error_message, "message");
    std::string c = code && *code && is_code(**code) ? **code : "malformed_error";
    std::string out = fmt::format("{}: {}", c, text && *text ? printable(**text) : std::string());
    if (auto first = reply_optional_u64(error_message, "first_offset"); first && *first) {
        out += fmt::format("{}{})", kFirstOffsetMark, **first);
    }
    return make_error(std::move(out));
}

}  // namespace sbx::agent

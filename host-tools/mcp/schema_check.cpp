#include "host-tools/mcp/schema_check.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace sbx::mcp {

using nlohmann::json;

namespace {

constexpr std::array<std::string_view, 15> kKeywords = {
    "type",     "properties", "required",  "additionalProperties", "items",   "enum",
    "minimum",  "maximum",    "minLength", "maxLength",            "minItems", "maxItems",
    "description", "default", "title"};

bool has_type(const json& value, std::string_view type) {
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    if (type == "string") return value.is_string();
    if (type == "boolean") return value.is_boolean();
    if (type == "null") return value.is_null();
    if (type == "integer") return value.is_number_integer();
    if (type == "number") return value.is_number();
    return false;
}

std::string where(std::string_view path) { return path.empty() ? std::string("arguments") : std::string(path); }

// UTF-8 code points counted, as JSON Schema's minLength/maxLength do.
std::size_t code_points(std::string_view text) {
    return static_cast<std::size_t>(
        std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

std::optional<std::string> check(const json& schema, const json& value, const std::string& path) {
    if (auto type = schema.find("type"); type != schema.end()) {
        bool ok = false;
        if (type->is_array()) {
            ok = std::any_of(type->begin(), type->end(), [&](const json& t) { return has_type(value, t.get<std::string>()); });
        } else {
            ok = has_type(value, type->get<std::string>());
        }
        if (!ok) {
            return fmt::format("{}: must be {}", where(path), type->is_array() ? type->dump() : type->get<std::string>());
        }
    }
    if (auto options = schema.find("enum"); options != schema.end() &&
                                             std::find(options->begin(), options->end(), value) == options->end()) {
        return fmt::format("{}: must be one of {}", where(path), options->dump());
    }
    if (value.is_number()) {
        if (auto min = schema.find("minimum"); min != schema.end() && value.get<double>() < min->get<double>()) {
            return fmt::format("{}: must be at least {}", where(path), min->dump());
        }
        if (auto max = schema.find("maximum"); max != schema.end() && value.get<double>() > max->get<double>()) {
            return fmt::format("{}: must be at most {}", where(path), max->dump());
        }
    }
    if (value.is_string()) {
        const std::size_t length = code_points(value.get_ref<const std::string&>());
        if (auto min = schema.find("minLength"); min != schema.end() && length < min->get<std::size_t>()) {
            return fmt::format("{}: must have at least {} characters", where(path), min->dump());
        }
        if (auto max = schema.find("maxLength"); max != schema.end() && length > max->get<std::size_t>()) {
            return fmt::format("{}: must have at most {} characters", where(path), max->dump());
        }
    }
    if (value.is_array()) {
        if (auto min = schema.find("minItems"); min != schema.end() && value.size() < min->get<std::size_t>()) {
            return fmt::format("{}: must have at least {} items", where(path), min->dump());
        }
        if (auto max = schema.find("maxItems"); max != schema.end() && value.size() > max->get<std::size_t>()) {
            return fmt::format("{}: must have at most {} items", where(path), max->dump());
        }
        if (auto items = schema.find("items"); items != schema.end()) {
            for (std::size_t i = 0; i < value.size(); ++i) {
                if (auto bad = check(*items, value[i], fmt::format("{}[{}]", where(path), i))) {
                    return bad;
                }
            }
        }
    }
    if (value.is_object()) {
        const json no_properties = json::object();
        const json& properties = schema.contains("properties") ? schema["properties"] : no_properties;
        for (const auto& name : schema.value("required", json::array())) {
            if (!value.contains(name.get<std::string>())) {
                return fmt::format("{}: {} is required", where(path), name.get<std::string>());
            }
        }
        const json additional = schema.value("additionalProperties", json(true));
        for (const auto& [name, member] : value.items()) {
            const std::string inner = path.empty() ? name : path + "." + name;
            if (auto property = properties.find(name); property != properties.end()) {
                if (auto bad = check(*property, member, inner)) {
                    return bad;
                }
            } else if (additional.is_boolean() && !additional.get<bool>()) {
                return fmt::format("{}: unknown field {}", where(path), name);
            } else if (additional.is_object()) {
                if (auto bad = check(additional, member, inner)) {
                    return bad;
                }
            }
        }
    }
    return std::nullopt;
}

void collect_unknown(const json& schema, std::vector<std::string>& out) {
    if (!schema.is_object()) {
        return;
    }
    for (const auto& [key, member] : schema.items()) {
        if (std::find(kKeywords.begin(), kKeywords.end(), key) == kKeywords.end()) {
            out.push_back(key);
        }
        if (key == "properties") {
            for (const auto& [name, property] : member.items()) {
                collect_unknown(property, out);
            }
        } else if (key == "items" || key == "additionalProperties") {
            collect_unknown(member, out);
        }
    }
}

}  // namespace

std::optional<std::string> schema_violation(const json& schema, const json& value) {
    return check(schema, value, "");
}

std::vector<std::string> unknown_keywords(const json& schema) {
    std::vector<std::string> out;
    collect_unknown(schema, out);
    return out;
}

bool is_utf8(std::string_view bytes) { return to_utf8(bytes) == bytes; }  // a replacement changes the bytes

std::string to_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    std::size_t i = 0;
    while (i < bytes.size()) {
        const auto b0 = static_cast<unsigned char>(bytes[i]);
        std::size_t length = 0;
        std::uint32_t min = 0;
        std::uint32_t cp = 0;
        if (b0 < 0x80) {
            out += bytes[i++];
            continue;
        }
        if ((b0 & 0xe0) == 0xc0) {
            length = 2, min = 0x80, cp = b0 & 0x1f;
        } else if ((b0 & 0xf0) == 0xe0) {
            length = 3, min = 0x800, cp = b0 & 0x0f;
        } else if ((b0 & 0xf8) == 0xf0) {
            length = 4, min = 0x10000, cp = b0 & 0x07;
        }
        bool ok = length != 0 && i + length <= bytes.size();
        for (std::size_t k = 1; ok && k < length; ++k) {
            const auto b = static_cast<unsigned char>(bytes[i + k]);
            ok = (b & 0xc0) == 0x80;
            cp = (cp << 6) | (b & 0x3f);
        }
        ok = ok && cp >= min && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
        if (ok) {
            out.append(bytes.substr(i, length));
            i += length;
        } else {
            out += "\xEF\xBF\xBD";  // U+FFFD
            ++i;
        }
    }
    return out;
}

}  // namespace sbx::mcp

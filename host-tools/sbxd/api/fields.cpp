#include "host-tools/sbxd/api/fields.hpp"

#include <limits>

#include "host-tools/sbxd/api/api_error.hpp"

namespace sbx::sbxd::api {

Error invalid_argument(std::string message) {
    return Error{std::move(message), 0, std::string(code::kInvalidArgument)};
}

Result<nlohmann::json> parse_body(std::string_view body) {
    if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        return nlohmann::json::object();
    }
    auto json = nlohmann::json::parse(body, nullptr, false);
    if (json.is_discarded()) {
        return make_coded_error(code::kBadRequest, "the request body is not valid JSON");
    }
    if (!json.is_object()) {
        return make_coded_error(code::kBadRequest, "the request body must be a JSON object, not {}",
                                json.type_name());
    }
    return json;
}

const nlohmann::json* Fields::take(std::string_view name) {
    read_.emplace(name);
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) {
        return nullptr;
    }
    return &*it;
}

bool Fields::has(std::string_view name) const {
    auto it = object_.find(name);
    return it != object_.end() && !it->is_null();
}

Result<std::optional<std::string>> Fields::string(std::string_view name) {
    const auto* value = take(name);
    if (value == nullptr) {
        return std::optional<std::string>();
    }
    if (!value->is_string()) {
        return invalid_argument(fmt::format("{} must be a string, not {}", name, value->type_name()));
    }
    return std::optional<std::string>(value->get<std::string>());
}

Result<std::optional<bool>> Fields::boolean(std::string_view name) {
    const auto* value = take(name);
    if (value == nullptr) {
        return std::optional<bool>();
    }
    if (!value->is_boolean()) {
        return invalid_argument(fmt::format("{} must be true or false, not {}", name, value->type_name()));
    }
    return std::optional<bool>(value->get<bool>());
}

Result<std::optional<std::int64_t>> Fields::integer(std::string_view name, std::int64_t min,
                                                    std::int64_t max) {
    const auto* value = take(name);
    if (value == nullptr) {
        return std::optional<std::int64_t>();
    }
    if (!value->is_number_integer()) {
        return invalid_argument(fmt::format("{} must be an integer, not {}", name,
                                            value->is_number_float() ? "a fraction" : value->type_name()));
    }
    if (value->is_number_unsigned() &&
        value->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return invalid_argument(fmt::format("{} must be {} to {}", name, min, max));
    }
    auto number = value->get<std::int64_t>();
    if (number < min || number > max) {
        return invalid_argument(fmt::format("{} must be {} to {}, not {}", name, min, max, number));
    }
    return std::optional<std::int64_t>(number);
}

Result<std::optional<StringMap>> Fields::string_map(std::string_view name) {
    const auto* value = take(name);
    if (value == nullptr) {
        return std::optional<StringMap>();
    }
    if (!value->is_object()) {
        return invalid_argument(
            fmt::format("{} must be an object of strings, not {}", name, value->type_name()));
    }
    StringMap map;
    for (const auto& [key, item] : value->items()) {
        if (!item.is_string()) {
            return invalid_argument(
                fmt::format("{}.{} must be a string, not {}", name, key, item.type_name()));
        }
        map.emplace(key, item.get<std::string>());
    }
    return std::optional<StringMap>(std::move(map));
}

Result<std::optional<std::vector<std::string>>> Fields::string_list(std::string_view name) {
    const auto* value = take(name);
    if (value == nullptr) {
        return std::optional<std::vector<std::string>>();
    }
    if (!value->is_array()) {
        return invalid_argument(fmt::format("{} must be an array of strings, not {}", name, value->type_name()));
    }
    std::vector<std::string> list;
    for (std::size_t i = 0; i < value->size(); ++i) {
        if (!(*value)[i].is_string()) {
            return invalid_argument(
                fmt::format("{}[{}] must be a string, not {}", name, i, (*value)[i].type_name()));
        }
        list.push_back((*value)[i].get<std::string>());
    }
    return std::optional<std::vector<std::string>>(std::move(list));
}

Result<void> Fields::finish() const {
    for (const auto& [key, value] : object_.items()) {
        if (read_.count(key) == 0) {
            return invalid_argument(fmt::format("unknown field '{}'", key));
        }
    }
    return ok();
}

}  // namespace sbx::sbxd::api

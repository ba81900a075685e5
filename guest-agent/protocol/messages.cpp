#include "guest-agent/protocol/messages.hpp"

#include <cerrno>

namespace sbx::agent {

std::string_view code_for_errno(int err) {
    switch (err) {
    case ENOENT: return code::kNotFound;
    case EEXIST: return code::kExists;
    case EACCES:
    case EPERM:
    case EROFS: return code::kPermissionDenied;
    case ENOSPC:
    case EDQUOT: return code::kNoSpace;
    case ENOTDIR: return code::kNotADirectory;
    case EISDIR: return code::kIsADirectory;
    case ENOTEMPTY: return code::kNotEmpty;
    case ECONNREFUSED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH: return code::kConnectFailed;
    default: return code::kIoError;
    }
}

Json error_message(std::string_view error_code, std::string_view message) {
    return Json{{"type", "error"}, {"code", error_code}, {"message", message}};
}

Json error_message(const Error& error) {
    return error_message(error.errno_value != 0 ? code_for_errno(error.errno_value) : code::kBadRequest,
                         error.to_string());
}

Result<Json> parse_message(std::string_view text) {
    // No exceptions escape: nlohmann's non-throwing parse, then shape checks.
    Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded()) {
        return make_error("frame is not valid JSON");
    }
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
        return make_error("message must be a JSON object with a string \"type\"");
    }
    return j;
}

namespace {

template <typename T, typename Check>
Result<T> get_field(const Json& j, std::string_view key, std::optional<T> fallback, Check is_type,
                    std::string_view type_name) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        if (fallback) {
            return *fallback;
        }
        return make_error("\"{}\" is required", key);
    }
    if (!is_type(*it)) {
        return make_error("\"{}\" must be {}", key, type_name);
    }
    return it->template get<T>();
}

}  // namespace

Result<std::string> get_string(const Json& j, std::string_view key, std::optional<std::string> fallback) {
    return get_field<std::string>(j, key, std::move(fallback), [](const Json& v) { return v.is_string(); }, "a string");
}

Result<std::int64_t> get_int(const Json& j, std::string_view key, std::optional<std::int64_t> fallback) {
    return get_field<std::int64_t>(j, key, fallback, [](const Json& v) { return v.is_number_integer(); },
                                   "an integer");
}

Result<bool> get_bool(const Json& j, std::string_view key, std::optional<bool> fallback) {
    return get_field<bool>(j, key, fallback, [](const Json& v) { return v.is_boolean(); }, "true or false");
}

}  // namespace sbx::agent

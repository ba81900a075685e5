#include "host-tools/sbxd/http/message.hpp"

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include <algorithm>
#include <cctype>

namespace sbx::sbxd::http {

std::string_view Request::query_value(std::string_view name) const {
    for (const auto& [key, value] : query) {
        if (key == name) {
            return value;
        }
    }
    return {};
}

std::string_view Request::header(std::string_view name) const {
    auto same = [&](const std::string& candidate) {
        return candidate.size() == name.size() &&
               std::equal(candidate.begin(), candidate.end(), name.begin(), [](char a, char b) {
                   return std::tolower(static_cast<unsigned char>(a)) ==
                          std::tolower(static_cast<unsigned char>(b));
               });
    };
    for (const auto& [key, value] : headers) {
        if (same(key)) {
            return value;
        }
    }
    return {};
}

Response Response::ok(nlohmann::json fields, std::string_view request_id, int status) {
    nlohmann::json body = {{"ok", true}, {"requestId", request_id}};
    body.update(fields);
    return Response{status, body.dump(), {}, {}, {}};
}

Response Response::error(const api::ApiError& error, std::string_view request_id) {
    return Response{error.status, api::error_body(error, request_id), {}, {}, {}};
}

Response Response::error(const Error& error, std::string_view request_id) {
    return Response::error(api::to_api_error(error), request_id);
}

std::string choose_ws_protocol(const Request& request, std::string_view wanted) {
    constexpr std::string_view kField = "sec-websocket-protocol";
    for (const auto& [name, value] : request.headers) {
        if (name.size() != kField.size() ||
            !std::equal(name.begin(), name.end(), kField.begin(), [](char a, char b) {
                return std::tolower(static_cast<unsigned char>(a)) == b;
            })) {
            continue;
        }
        std::string_view rest = value;
        while (!rest.empty()) {
            const auto comma = rest.find(',');
            std::string_view token = rest.substr(0, comma);
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
            const auto first = token.find_first_not_of(" \t");
            const auto last = token.find_last_not_of(" \t");
            if (first != std::string_view::npos && token.substr(first, last - first + 1) == wanted) {
                return std::string(wanted);
            }
        }
    }
    return "";
}

Result<std::pair<std::string, Pairs>> split_target(std::string_view target) {
    auto parsed = boost::urls::parse_origin_form(target);
    if (!parsed) {
        return make_coded_error(api::code::kBadRequest,
                                "the request target is not a path with an optional query");
    }
    const boost::urls::url_view& url = *parsed;
    std::pair<std::string, Pairs> out;
    out.first = url.path();
    for (const auto& param : url.params()) {
        out.second.emplace_back(param.key, param.value);
    }
    return out;
}

}  // namespace sbx::sbxd::http

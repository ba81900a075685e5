#include "host-tools/mcp/api_caller.hpp"

#include <fmt/format.h>

namespace sbx::mcp {

std::string string_member(const Json& object, std::string_view key) {
    if (!object.is_object()) {
        return {};
    }
    const auto it = object.find(std::string(key));
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string url_encode(std::string_view text) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if ((byte >= 'A' && byte <= 'Z') || (byte >= 'a' && byte <= 'z') || (byte >= '0' && byte <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~') {
            out += c;
        } else {
            out += '%';
            out += kHex[byte >> 4];
            out += kHex[byte & 0xf];
        }
    }
    return out;
}

namespace {

struct Collected {
    ApiHead head;
    std::string body;
    bool too_large = false;
};

Result<Collected> collect(ApiCaller& api, const ApiCall& call, std::size_t limit) {
    Collected out;
    auto head = api.call(call, [&out, limit](std::string_view bytes) {
        if (out.body.size() + bytes.size() > limit) {
            out.too_large = true;
            return false;
        }
        out.body.append(bytes);
        return true;
    });
    if (!head) {
        return head.error();
    }
    out.head = *head;
    return out;
}

// The API's error body (docs/api.md "Errors") as an Error with its code.
Error api_error(const ApiCall& call, const Collected& answer) {
    const Json body = Json::parse(answer.body, nullptr, false);
    if (body.is_object() && body.value("code", Json()).is_string()) {
        return make_coded_error(body["code"].get<std::string>(), "{}", string_member(body, "message"));
    }
    return make_coded_error("bad_response", "sbxd answered {} {} with status {} and no API error", call.method,
                            call.target, answer.head.status);
}

bool success(int status) { return status >= 200 && status < 300; }

}  // namespace

Result<Json> call_json(ApiCaller& api, const ApiCall& call, std::size_t limit) {
    auto answer = collect(api, call, limit);
    if (!answer) {
        return answer.error();
    }
    if (answer->too_large) {
        return make_coded_error("bad_response", "sbxd's answer to {} {} is over {} bytes", call.method, call.target,
                                limit);
    }
    if (!success(answer->head.status)) {
        return api_error(call, *answer);
    }
    Json body = Json::parse(answer->body, nullptr, false);
    if (!body.is_object()) {
        return make_coded_error("bad_response", "sbxd answered {} {} with a body that is not a JSON object",
                                call.method, call.target);
    }
    return body;
}

Result<std::string> call_bytes(ApiCaller& api, const ApiCall& call, std::size_t limit) {
    auto answer = collect(api, call, limit);
    if (!answer) {
        return answer.error();
    }
    if (!success(answer->head.status)) {
        return api_error(call, *answer);
    }
    if (answer->too_large) {
        return make_coded_error("too_large", "{} is over {} bytes", call.target, limit);
    }
    return std::move(answer->body);
}

ApiCall get(std::string target) { return ApiCall{"GET", std::move(target), {}, {}}; }

ApiCall post(std::string target, const Json& body) {
    return ApiCall{"POST", std::move(target), body.dump(), {{"Content-Type", "application/json"}}};
}

ApiCall del(std::string target) { return ApiCall{"DELETE", std::move(target), {}, {}}; }

}  // namespace sbx::mcp

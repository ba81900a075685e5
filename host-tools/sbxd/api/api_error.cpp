#include "host-tools/sbxd/api/api_error.hpp"

#include <nlohmann/json.hpp>

#include <utility>

namespace sbx::sbxd::api {

namespace {

constexpr std::pair<std::string_view, int> kStatuses[] = {
    {code::kBadRequest, 400},       {code::kInvalidArgument, 400},
    {code::kUnauthorized, 401},     {code::kForbidden, 403},
    {code::kNotFound, 404},         {code::kMethodNotAllowed, 405},
    {code::kInvalidState, 409},     {code::kIdempotencyConflict, 409},
    {code::kAlreadyExists, 409},    {code::kPayloadTooLarge, 413},
    {code::kHeadersTooLarge, 431},  {code::kRateLimited, 429},
    {code::kLimitReached, 429},     {code::kInternal, 500},
    {code::kNotImplemented, 501},   {code::kNoReadyMachine, 502},
    {code::kAgentUnavailable, 502}, {code::kCapacityExceeded, 503},
    {code::kInsufficientStorage, 507},
};

}  // namespace

int status_for_code(std::string_view error_code) {
    for (const auto& [name, status] : kStatuses) {
        if (name == error_code) {
            return status;
        }
    }
    return 500;
}

ApiError to_api_error(const Error& error) {
    int status = status_for_code(error.code);
    std::string error_code = status == 500 ? std::string(code::kInternal) : error.code;
    return ApiError{status, std::move(error_code), error.to_string()};
}

std::string error_body(const ApiError& error, std::string_view request_id) {
    // A message may quote the request (a percent-decoded query value), which
    // need not be UTF-8: replaced, not thrown as type_error 316.
    return nlohmann::json{{"ok", false},
                          {"status", error.status},
                          {"code", error.code},
                          {"message", error.message},
                          {"requestId", request_id}}
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace sbx::sbxd::api

// The one error format of the API (product.md §5, docs/api.md "Errors"):
// {"ok":false,"status":N,"code":"...","message":"...","requestId":"..."}.
// Everything below the HTTP layer fails with a coded sbx::Error; the code
// alone decides the status here.
#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd::api {

// The stable codes; clients act on these, never on messages.
namespace code {
inline constexpr std::string_view kBadRequest = "bad_request";  // 400 unreadable request (not JSON, bad HTTP)
inline constexpr std::string_view kInvalidArgument = "invalid_argument";  // 400 a field or parameter is wrong
inline constexpr std::string_view kUnauthorized = "unauthorized";         // 401 no or unknown API key
inline constexpr std::string_view kForbidden = "forbidden";  // 403 the key's scope does not cover this
inline constexpr std::string_view kNotFound = "not_found";   // 404 route, sandbox or snapshot
inline constexpr std::string_view kMethodNotAllowed = "method_not_allowed";  // 405
inline constexpr std::string_view kInvalidState = "invalid_state";           // 409 wrong state for this
inline constexpr std::string_view kIdempotencyConflict =
    "idempotency_conflict";                                                 // 409 key reused, other body
inline constexpr std::string_view kAlreadyExists = "already_exists";        // 409 e.g. a snapshot name
inline constexpr std::string_view kPayloadTooLarge = "payload_too_large";   // 413
inline constexpr std::string_view kHeadersTooLarge = "headers_too_large";   // 431
inline constexpr std::string_view kRateLimited = "rate_limited";            // 429 with Retry-After
inline constexpr std::string_view kLimitReached = "limit_reached";          // 429 a concurrency limit
inline constexpr std::string_view kInternal = "internal";                   // 500
inline constexpr std::string_view kNotImplemented = "not_implemented";      // 501
inline constexpr std::string_view kNoReadyMachine = "no_ready_machine";     // 502 retryable
inline constexpr std::string_view kAgentUnavailable = "agent_unavailable";  // 502 the guest's agent failed
inline constexpr std::string_view kCapacityExceeded = "capacity_exceeded";  // 503 retryable
inline constexpr std::string_view kInsufficientStorage = "insufficient_storage";  // 507 the host's disk is full
}  // namespace code

struct ApiError {
    int status = 500;
    std::string code;
    std::string message;
};

// The HTTP status for a code; unknown or empty codes are 500 "internal".
[[nodiscard]] int status_for_code(std::string_view code);

// An Error from any layer as the API reports it. An error without a known
// code is "internal" (its message is kept: sbxd's own clients are trusted
// with it, and it names what broke).
[[nodiscard]] ApiError to_api_error(const Error& error);

[[nodiscard]] std::string error_body(const ApiError& error, std::string_view request_id);

}  // namespace sbx::sbxd::api

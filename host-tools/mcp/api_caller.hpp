// How the MCP server reaches sbxd's /v1 API (docs/api.md): `sbx mcp` over
// sbx's HTTP client, sbxd's /mcp in-process through its ApiService, with
// the caller's own key and scope either way. The MCP layer sees only
// requests and answers, so every tool is exactly an API call (or a few),
// checked and logged as any other.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.hpp"

namespace sbx::mcp {

using Json = nlohmann::json;

struct ApiCall {
    std::string method = "GET";
    std::string target;  // origin-form, encoded: /v1/sandboxes?labels=a%3Db
    std::string body;    // JSON, or a file's bytes (PUT …/files)
    std::vector<std::pair<std::string, std::string>> headers;
};

struct ApiHead {
    int status = 0;
    std::string content_type;
};

// Takes the body as it arrives; false: read no more (the connection is
// dropped, which ends an attached exec's process, docs/api.md).
using BodySink = std::function<bool(std::string_view)>;

class ApiCaller {
public:
    virtual ~ApiCaller() = default;
    // The answer's head, its body through `sink`. An error only when sbxd
    // could not be asked or answered badly (codes "unreachable",
    // "connection_lost", "bad_response"); an error status is an answer.
    [[nodiscard]] virtual Result<ApiHead> call(const ApiCall& call, const BodySink& sink) = 0;
};

// Percent-encodes one query value or path segment (RFC 3986 §2.1: all but
// the unreserved characters).
[[nodiscard]] std::string url_encode(std::string_view text);

// The member `key` of `object` when it is a string, else "" (a JSON value
// from a client or a peer may lack it, or hold another type).
[[nodiscard]] std::string string_member(const Json& object, std::string_view key);

// A call whose answer is a JSON object: the object for 2xx; for an error
// status the API's error (docs/api.md "Errors") as an Error with its code,
// and "bad_response" for a body that is not JSON or is over `limit`.
[[nodiscard]] Result<Json> call_json(ApiCaller& api, const ApiCall& call, std::size_t limit = 16u << 20);
// The raw body of a 2xx answer, at most `limit` bytes ("too_large" past it).
[[nodiscard]] Result<std::string> call_bytes(ApiCaller& api, const ApiCall& call, std::size_t limit);

[[nodiscard]] ApiCall get(std::string target);
[[nodiscard]] ApiCall post(std::string target, const Json& body);
[[nodiscard]] ApiCall del(std::string target);

}  // namespace sbx::mcp

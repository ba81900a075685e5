// sbxd's own view of an HTTP exchange, independent of Beast, so that the
// router and the handlers are plain functions of a Request (and testable
// without a socket).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/auth/principal.hpp"
#include "host-tools/sbxd/http/stream.hpp"
#include "host-tools/sbxd/http/ws_channel.hpp"

namespace sbx::sbxd::http {

using Pairs = std::vector<std::pair<std::string, std::string>>;

// Unix: sbxd's own socket (its file mode decides who connects); Tcp: a
// bearer key on every request; Guest: the Unix socket that sandboxes'
// guests reach over vsock (docs/sbxd.md, "The API inside a sandbox"),
// where every request needs a bearer key too (SANDBOXER_TOKEN); Proxied:
// a connection sbxd's HTTPS proxy handed over after its own token check
// (Server::serve: the desktop viewer), never the API's.
enum class Transport { Unix, Tcp, Guest, Proxied };

struct Request {
    std::string method;  // "GET", as sent
    std::string path;    // percent-decoded
    Pairs query;         // percent-decoded, in order
    Pairs headers;       // names as sent
    std::string body;
    // Instead of `body`, for routes whose body is streamed (Router::add
    // with BodyMode::Streamed): read it from here, on the handler's thread.
    std::shared_ptr<BodyReader> body_stream;
    // A valid WebSocket opening handshake (RFC 6455 §4.2.1): only routes
    // added with BodyMode::WebSocket take it, and only it reaches them.
    bool websocket = false;
    std::string request_id;
    Transport transport = Transport::Unix;
    Principal principal;  // set by the daemon's authentication before routing

    // The first header of that name (case-insensitive, RFC 9110 §5.1), or "".
    [[nodiscard]] std::string_view header(std::string_view name) const;
    // The first query parameter of that name, or "".
    [[nodiscard]] std::string_view query_value(std::string_view name) const;
};

// Produces a streamed response body on a thread of its own; it returns
// when the body is complete (or the writer says the client is gone).
using BodyProducer = std::function<void(BodyWriter&)>;
// Runs a WebSocket connection on a thread of its own, once the server has
// accepted the handshake; the connection closes when it returns.
using WsHandler = std::function<void(WsChannel&)>;

struct Response {
    int status = 200;
    std::string body;  // JSON
    Pairs headers;     // besides Content-Length and X-Request-Id; Content-Type here replaces JSON's
    // When set, the body instead: sent with chunked transfer coding as the
    // producer writes it (HTTP/1.0: until the connection closes).
    BodyProducer stream;
    // For a WebSocket request: the handshake is accepted (101) and this
    // runs the connection; status, body and headers are not sent.
    WsHandler websocket;
    // The subprotocol the 101 names (Sec-WebSocket-Protocol, RFC 6455
    // §4.2.2 item 5.4): one the client offered (choose_ws_protocol), or
    // none.
    std::string websocket_protocol{};

    // {"ok":true, "requestId":..., ...fields}
    [[nodiscard]] static Response ok(nlohmann::json fields, std::string_view request_id, int status = 200);
    [[nodiscard]] static Response error(const api::ApiError& error, std::string_view request_id);
    [[nodiscard]] static Response error(const Error& error, std::string_view request_id);
};

// The subprotocol to answer a WebSocket handshake with: `wanted` when the
// request's Sec-WebSocket-Protocol fields (comma-separated tokens, any
// number of fields: RFC 6455 §11.3.4) offer it, else "" (none named).
[[nodiscard]] std::string choose_ws_protocol(const Request& request, std::string_view wanted);

// Splits a request target ("/v1/sandboxes?labels=a%3Db") into its decoded
// path and query; bad_request when it is not an origin-form target
// (RFC 9112 §3.2.1) or decodes badly.
[[nodiscard]] Result<std::pair<std::string, Pairs>> split_target(std::string_view target);

}  // namespace sbx::sbxd::http

// Routes of method + path pattern ("/v1/sandboxes/{id}") to handlers. A
// path no route matches is 404 not_found; one that matches only with
// other methods is 405 method_not_allowed with an Allow header (RFC 9110
// §15.5.6).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "host-tools/sbxd/http/message.hpp"

namespace sbx::sbxd::http {

using PathParams = std::map<std::string, std::string, std::less<>>;
using Handler = std::function<Response(const Request&, const PathParams&)>;

// A route's request body is read whole (up to the server's body limit)
// before the handler runs, or streamed to it (Request::body_stream); or
// the route is a WebSocket (RFC 6455), whose handler answers with
// Response::websocket. A WebSocket handshake to any other route, and a
// plain request to a WebSocket route, are 400 bad_request.
enum class BodyMode { Whole, Streamed, WebSocket };

class Router {
public:
    // Pattern segments in braces capture one non-empty path segment.
    void add(std::string_view method, std::string_view pattern, Handler handler,
             BodyMode body = BodyMode::Whole);
    [[nodiscard]] Response dispatch(const Request& request) const;
    // Whether the route a request (method and path; no body yet) goes to
    // streams its body.
    [[nodiscard]] bool streams_body(const Request& request) const;

private:
    struct Route {
        std::string method;
        std::vector<std::string> segments;
        Handler handler;
        BodyMode body = BodyMode::Whole;
    };
    std::vector<Route> routes_;
};

}  // namespace sbx::sbxd::http

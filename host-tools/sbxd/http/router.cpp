#include "host-tools/sbxd/http/router.hpp"

#include <optional>

namespace sbx::sbxd::http {

namespace {

// "/v1/sandboxes/x" -> {"v1", "sandboxes", "x"}; a trailing slash is a
// last empty segment, so "/v1/sandboxes/" matches no route.
std::vector<std::string> segments_of(std::string_view path) {
    std::vector<std::string> out;
    if (path.empty() || path[0] != '/') {
        return out;
    }
    path.remove_prefix(1);
    for (;;) {
        auto slash = path.find('/');
        out.emplace_back(path.substr(0, slash));
        if (slash == std::string_view::npos) {
            return out;
        }
        path.remove_prefix(slash + 1);
    }
}

std::optional<PathParams> match(const std::vector<std::string>& pattern,
                                const std::vector<std::string>& path) {
    if (pattern.size() != path.size()) {
        return std::nullopt;
    }
    PathParams params;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        const std::string& want = pattern[i];
        if (want.size() > 2 && want.front() == '{' && want.back() == '}') {
            if (path[i].empty()) {
                return std::nullopt;
            }
            params.emplace(want.substr(1, want.size() - 2), path[i]);
        } else if (want != path[i]) {
            return std::nullopt;
        }
    }
    return params;
}

}  // namespace

void Router::add(std::string_view method, std::string_view pattern, Handler handler, BodyMode body) {
    routes_.push_back(Route{std::string(method), segments_of(pattern), std::move(handler), body});
}

bool Router::streams_body(const Request& request) const {
    const auto path = segments_of(request.path);
    for (const auto& route : routes_) {
        if (route.method == request.method && match(route.segments, path)) {
            return route.body == BodyMode::Streamed;
        }
    }
    return false;
}

Response Router::dispatch(const Request& request) const {
    const auto path = segments_of(request.path);
    std::string allowed;
    for (const auto& route : routes_) {
        auto params = match(route.segments, path);
        if (!params) {
            continue;
        }
        if (route.method == request.method) {
            if (request.websocket != (route.body == BodyMode::WebSocket)) {
                auto why = request.websocket
                               ? make_coded_error(api::code::kBadRequest, "{} {} is not a WebSocket", request.method,
                                                  request.path)
                               : make_coded_error(api::code::kBadRequest,
                                                  "{} {} is a WebSocket: send an Upgrade: websocket handshake",
                                                  request.method, request.path);
                return Response::error(why, request.request_id);
            }
            return route.handler(request, *params);
        }
        if (allowed.find(route.method) == std::string::npos) {
            allowed += (allowed.empty() ? "" : ", ") + route.method;
        }
    }
    if (!allowed.empty()) {
        Response response = Response::error(
            make_coded_error(api::code::kMethodNotAllowed, "{} {} is not a route; allowed: {}",
                             request.method, request.path, allowed),
            request.request_id);
        response.headers.emplace_back("Allow", allowed);
        return response;
    }
    return Response::error(
        make_coded_error(api::code::kNotFound, "no route {} {}", request.method, request.path),
        request.request_id);
}

}  // namespace sbx::sbxd::http

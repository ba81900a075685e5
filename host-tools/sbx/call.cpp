#include "host-tools/sbx/commands.hpp"

namespace sbx::cli {

Failure explained(const Context& ctx, Failure failure) {
    if (failure.code == "unreachable") {
        failure.message += "; is sbxd running there? (SBX_HOST picks the daemon)";
    } else if (failure.status == 401 && ctx.client.address().kind == HostAddress::Kind::Tcp &&
               !ctx.client.has_api_key()) {
        failure.message += " (set SBX_API_KEY to a key from `sbxd keys create`)";
    }
    return failure;
}

Outcome call(const Context& ctx, const HttpRequest& request) {
    auto reply = ctx.client.send(request);
    if (!reply) {
        return explained(ctx, failure_of(reply.error()));
    }
    if (reply->status < 200 || reply->status >= 300) {
        return explained(ctx, failure_of(*reply));
    }
    Json body = Json::parse(reply->body, nullptr, false);
    if (!body.is_object()) {
        Failure failure = failure_of(
            make_coded_error("bad_response", "sbxd answered {} {} with a body that is not a JSON object",
                             request.method, request.target));
        failure.status = reply->status;
        failure.request_id = reply->request_id;
        return failure;
    }
    return body;
}

HttpRequest get(std::string target) {
    return HttpRequest{"GET", std::move(target), {}, {}};
}

HttpRequest post(std::string target, const Json& body) {
    return HttpRequest{"POST", std::move(target), body.dump(), {{"Content-Type", "application/json"}}};
}

HttpRequest del(std::string target) {
    return HttpRequest{"DELETE", std::move(target), {}, {}};
}

}  // namespace sbx::cli

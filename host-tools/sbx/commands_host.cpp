// host, host ls, unhost, ca: hosted ports (docs/api.md, "Hosted ports").
#include "host-tools/sbx/commands.hpp"

namespace sbx::cli {

namespace {

std::string ports_target(const std::string& id) {
    return target({"v1", "sandboxes", id, "ports"});
}

// The URL a person opens: the one with its token when the port is private.
std::string open_url(const Json& port) {
    return port.contains("tokenUrl") ? cell(port, "tokenUrl") : cell(port, "url");
}

std::string access(const Json& port) {
    std::string text = port.value("public", false) ? "public" : "private";
    if (port.value("localhost", false)) {
        text += ", localhost";
    }
    return text;
}

}  // namespace

int run_host(const Context& ctx, const HostCommand& command) {
    Json body = {{"port", command.port}, {"public", command.is_public}, {"localhost", command.localhost}};
    Outcome reply = call(ctx, post(ports_target(command.id), body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json port = reply.body().value("hostedPort", Json::object());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "hosted"}, {"id", command.id}, {"hostedPort", port}});
    } else {
        ctx.out.text(fmt::format("{}\n", open_url(port)));
    }
    return kExitOk;
}

int run_host_ls(const Context& ctx, const std::string& id) {
    Outcome reply = call(ctx, get(id.empty() ? target({"v1", "ports"}) : ports_target(id)));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json ports = reply.body().value("hostedPorts", Json::array());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "hostedPorts"}, {"hostedPorts", ports}});
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : ports) {
        rows.push_back({cell(p, "sandboxId"), cell(p, "port"), access(p), open_url(p)});
    }
    ctx.out.text(format_table({"SANDBOX", "PORT", "ACCESS", "URL"}, rows));
    return kExitOk;
}

int run_unhost(const Context& ctx, const std::string& id, std::uint16_t port) {
    Outcome reply = call(ctx, del(target({"v1", "sandboxes", id, "ports", std::to_string(port)})));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    if (ctx.out.json()) {
        ctx.out.event({{"type", "unhosted"}, {"id", id}, {"port", port}});
    } else {
        ctx.out.text(fmt::format("{}  port {} no longer hosted\n", id, port));
    }
    return kExitOk;
}

int run_ca(const Context& ctx) {
    Outcome reply = call(ctx, get(target({"v1", "ca"})));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    // PEM on stdout either way, so that `sbx ca > ca.pem` works piped.
    ctx.out.text(reply.body().value("certificate", std::string()));
    return kExitOk;
}

}  // namespace sbx::cli

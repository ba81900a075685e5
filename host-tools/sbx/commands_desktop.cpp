// desktop: the sandbox's desktop (docs/api.md, "The desktop"): started,
// with the private link that shows it in a browser; its status; a
// screenshot; the computer-use actions (desktop_actions.hpp).
#include <unistd.h>

#include "base/atomic_file.hpp"
#include "base/unique_fd.hpp"
#include "host-tools/sbx/commands.hpp"
#include "host-tools/sbx/files_transfer.hpp"

namespace sbx::cli {

namespace {

std::string desktop_target(const std::string& id, std::string_view tail = {},
                           const std::vector<std::pair<std::string, std::string>>& query = {}) {
    return tail.empty() ? target({"v1", "sandboxes", id, "desktop"}, query)
                        : target({"v1", "sandboxes", id, "desktop", tail}, query);
}

// The link a person opens: the control one, or with --view-only the one
// that only shows (a read-only key gets no control link: null).
std::string link_of(const Json& desktop, bool view_only) {
    return cell(desktop, view_only ? "viewOnlyUrl" : "url");
}

int start(const Context& ctx, const DesktopCommand& command) {
    Json body = Json::object();
    if (command.display) {
        body["display"] = *command.display;
    }
    if (command.width) {
        body["width"] = *command.width;
    }
    if (command.height) {
        body["height"] = *command.height;
    }
    Outcome reply = call(ctx, post(desktop_target(command.id), body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json desktop = reply.body().value("desktop", Json::object());
    for (const auto& warning : reply.body().value("warnings", Json::array())) {
        ctx.out.note(fmt::format("sbx: warning: {}", warning.is_string() ? warning.get<std::string>() : warning.dump()));
    }
    if (ctx.out.json()) {
        ctx.out.event({{"type", "desktop"}, {"id", command.id}, {"viewOnly", command.view_only}, {"desktop", desktop}});
        return kExitOk;
    }
    ctx.out.note(fmt::format("{}  desktop :{} {}x{}{}", command.id, cell(desktop, "display"), cell(desktop, "width"),
                             cell(desktop, "height"), desktop.value("started", false) ? " (started)" : ""));
    ctx.out.text(link_of(desktop, command.view_only) + "\n");
    return kExitOk;
}

int status(const Context& ctx, const DesktopCommand& command) {
    Outcome reply = call(ctx, get(desktop_target(command.id)));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json desktop = reply.body().value("desktop", Json::object());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "desktop"}, {"id", command.id}, {"viewOnly", command.view_only}, {"desktop", desktop}});
        return kExitOk;
    }
    if (!desktop.value("running", false)) {
        ctx.out.text(fmt::format("{}  no desktop runs (sbx desktop {} starts one)\n", command.id, command.id));
        return kExitOk;
    }
    ctx.out.text(fmt::format("{}  desktop :{} {}x{}, session {}\n{}\n", command.id, cell(desktop, "display"),
                             cell(desktop, "width"), cell(desktop, "height"),
                             desktop.value("sessionRunning", false) ? "running" : "ended",
                             link_of(desktop, command.view_only)));
    return kExitOk;
}

int screenshot(const Context& ctx, const DesktopCommand& command) {
    if (command.words.size() != 1) {
        return ctx.out.fail(make_coded_error("usage", "desktop: want screenshot [-o FILE] [--max-width N]"));
    }
    std::vector<std::pair<std::string, std::string>> query;
    if (command.max_width != 0) {
        query.emplace_back("maxWidth", std::to_string(command.max_width));
    }
    auto reply = ctx.client.send(get(desktop_target(command.id, "screenshot", query)));
    if (!reply) {
        return ctx.out.fail(explained(ctx, failure_of(reply.error())));
    }
    if (reply->status != 200) {
        return ctx.out.fail(explained(ctx, failure_of(*reply)));
    }
    const std::string file = command.output.empty() ? command.id + "-screenshot.png" : command.output;
    if (file == "-") {
        if (auto written = write_all(STDOUT_FILENO, reply->body.data(), reply->body.size()); !written) {
            return ctx.out.fail(local_failure(written.error().context("stdout")));
        }
        return kExitOk;
    }
    if (auto saved = write_file_atomically(file, reply->body, 0644); !saved) {
        return ctx.out.fail(local_failure(saved.error()));
    }
    if (ctx.out.json()) {
        ctx.out.event({{"type", "screenshot"}, {"id", command.id}, {"file", file}, {"bytes", reply->body.size()}});
    } else {
        ctx.out.text(fmt::format("{}\n", file));
    }
    return kExitOk;
}

int action(const Context& ctx, const DesktopCommand& command) {
    auto body = desktop_action_body(command.words, command.flags);
    if (!body) {
        return ctx.out.fail(body.error());
    }
    Outcome reply = call(ctx, post(desktop_target(command.id, "actions"), *body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json result = reply.body().value("result", Json::object());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "desktop_action"}, {"id", command.id}, {"action", (*body)["action"]}, {"result", result}});
    } else if ((*body)["action"] == "cursor_position") {
        ctx.out.text(fmt::format("{} {}\n", cell(result, "x"), cell(result, "y")));
    }
    return kExitOk;
}

}  // namespace

int run_desktop(const Context& ctx, const DesktopCommand& command) {
    if (command.words.empty()) {
        return start(ctx, command);
    }
    const std::string& verb = command.words.front();
    if (verb == "status") {
        return command.words.size() == 1 ? status(ctx, command)
                                         : ctx.out.fail(make_coded_error("usage", "desktop: want status"));
    }
    if (verb == "screenshot") {
        return screenshot(ctx, command);
    }
    return action(ctx, command);
}

}  // namespace sbx::cli

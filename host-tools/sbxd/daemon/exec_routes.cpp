// POST /v1/sandboxes/{id}/exec: a command run attached, its output
// streamed as NDJSON while it runs, or detached (process_routes.cpp
// follows it). Every exec gets a history row.
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "guest-agent/exec/exec_client.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "base/base64.hpp"
#include "host-tools/sbxd/daemon/exec_request.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"

namespace sbx::sbxd {

namespace {

using http::Response;
using nlohmann::json;

// The first error among the fields read, if any.
template <typename... Results>
std::optional<Error> first_error(const Results&... results) {
    std::optional<Error> error;
    ((error = error ? error : results ? std::nullopt : std::optional<Error>(results.error())), ...);
    return error;
}

}  // namespace

Result<ExecBody> parse_exec(std::string_view text) {
    auto body = api::parse_body(text);
    if (!body) {
        return body.error();
    }
    return parse_exec_fields(std::move(*body), ExecForm::Http);
}

Result<ExecBody> parse_exec_fields(json object, ExecForm form) {
    // `command` is an array, which Fields does not read: take it out first.
    std::optional<json> command;
    if (auto it = object.find("command"); it != object.end() && !it->is_null()) {
        command = *it;
    }
    object.erase("command");
    api::Fields fields(object);
    auto shell = fields.string("shell");
    auto env = fields.string_map("env");
    auto cwd = fields.string("cwd");
    auto user = fields.string("user");
    auto timeout = fields.integer("timeoutMs", 0, 1'000'000'000'000);
    // Over a WebSocket stdin is its binary messages, and nothing detaches.
    Result<std::optional<std::string>> stdin_text = std::optional<std::string>();
    Result<std::optional<bool>> detach = std::optional<bool>();
    Result<std::optional<bool>> stdin_open = std::optional<bool>();
    if (form == ExecForm::Http) {
        stdin_text = fields.string("stdin");
        detach = fields.boolean("detach");
        stdin_open = fields.boolean("stdinOpen");
    }
    if (auto error = first_error(shell, env, cwd, user, timeout, stdin_text, detach, stdin_open)) {
        return *error;
    }
    if (auto r = fields.finish(); !r) {
        return r.error();
    }
    ExecBody out;
    if (command.has_value() == shell->has_value()) {
        return api::invalid_argument("give exactly one of command (an array of strings) and shell (a string)");
    }
    if (command) {
        const bool strings = command->is_array() && !command->empty() &&
                             std::all_of(command->begin(), command->end(), [](const json& a) { return a.is_string(); });
        if (!strings) {
            return api::invalid_argument("command must be a non-empty array of strings");
        }
        for (const auto& arg : *command) {
            out.request.argv.push_back(arg.get<std::string>());
        }
        out.command = *command;
    } else {
        if (shell->value().empty()) {
            return api::invalid_argument("shell must not be empty");
        }
        out.request.shell = **shell;
        out.command = json::array({"/bin/sh", "-c", **shell});
    }
    if (*env) {
        out.request.env = std::map<std::string, std::string>(env->value().begin(), env->value().end());
    }
    out.request.cwd = cwd->value_or("");
    out.request.user = user->value_or("");
    out.request.timeout = std::chrono::milliseconds(timeout->value_or(0));
    out.detach = detach->value_or(false);
    if (stdin_open->value_or(false)) {
        if (!out.detach) {
            return api::invalid_argument("stdinOpen is for a detached process (an attached one takes stdin)");
        }
        out.request.stdin_open = true;  // written with POST …/processes/{proc}/stdin
    }
    if (*stdin_text) {
        if (out.detach) {
            return api::invalid_argument("stdin cannot be given to a detached process (stdinOpen, then POST …/stdin)");
        }
        auto bytes = base64_decode(**stdin_text);
        if (!bytes) {
            return api::invalid_argument("stdin: " + bytes.error().message);
        }
        out.request.stdin_data = std::move(*bytes);
    }
    return out;
}

json exit_event(const agent::ExitInfo& exit) {
    json out = {{"type", "exit"}, {"exitCode", exit.code ? json(*exit.code) : json(nullptr)}};
    if (exit.signal) {
        out["signal"] = *exit.signal;
    }
    if (exit.timed_out) {
        out["timedOut"] = true;
    }
    return out;
}

namespace {

std::string line(const json& object) {
    return object.dump() + "\n";
}

// The attached exec's state, shared by the producer (std::function wants
// a copyable capture).
struct AttachedExec {
    std::shared_ptr<agent::AgentClient> client;
    agent::ExecSession session;
    std::optional<std::string> stdin_data;
    std::int64_t history_id = 0;
};

// Streams the exec's events as NDJSON lines (exec-api: start, stdout,
// stderr, exit, or a last error line).
void stream_exec(AttachedExec& exec, Store& store, http::BodyWriter& out) {
    agent::AgentClient& client = *exec.client;
    // A client that leaves ends the agent connection, which kills the
    // process group (docs/agent-protocol.md, exec).
    auto hook = out.on_cancel([fd = client.stream().fd()] { ::shutdown(fd, SHUT_RDWR); });
    std::thread feeder;
    if (exec.stdin_data) {
        feeder = std::thread([&exec] {
            const auto* bytes = reinterpret_cast<const std::uint8_t*>(exec.stdin_data->data());
            if (exec.session.write_stdin(std::span(bytes, exec.stdin_data->size()))) {
                [[maybe_unused]] auto r = exec.session.close_stdin();
            }
        });
    }
    if (out.write(line({{"type", "start"}, {"process", nullptr}, {"pid", exec.session.pid()}}))) {
        while (true) {
            auto event = exec.session.next();
            if (!event) {
                [[maybe_unused]] auto r = out.write(
                    line({{"type", "error"}, {"code", guest_error(event.error()).code}, {"message", event.error().to_string()}}));
                break;
            }
            if (event->kind == agent::ExecSession::Event::Exit) {
                [[maybe_unused]] auto r =
                    store.finish_exec(exec.history_id, history_exit_code(event->exit.code, event->exit.signal));
                [[maybe_unused]] auto w = out.write(line(exit_event(event->exit)));
                break;
            }
            if (event->kind != agent::ExecSession::Event::Output) {
                continue;
            }
            std::string_view data(reinterpret_cast<const char*>(event->data.data()), event->data.size());
            const char* type = event->channel == agent::Channel::Stderr ? "stderr" : "stdout";
            if (!out.write(line({{"type", type}, {"data", base64_encode(data)}}))) {
                break;
            }
        }
    }
    if (feeder.joinable()) {
        // After the exit the agent reads and drops stdin the process left;
        // on any other end, the connection goes and the write fails.
        if (out.cancelled()) {
            ::shutdown(client.stream().fd(), SHUT_RDWR);
        }
        feeder.join();
    }
}

}  // namespace

Response GuestRoutes::exec(const Request& request, const PathParams& params) const {
    const std::string& id = params.at("id");
    auto parsed = parse_exec(request.body);
    if (!parsed) {
        return Response::error(parsed.error(), request.request_id);
    }
    auto client = connect(id);
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    auto history_id = store_.add_exec(id, parsed->command.dump(), clock_(), request.principal.key());
    if (!history_id) {
        return Response::error(history_id.error(), request.request_id);
    }
    if (parsed->detach) {
        auto process = agent::exec_detached(**client, parsed->request);
        if (!process) {
            return Response::error(guest_error(process.error()), request.request_id);
        }
        remember(id, process->id, *history_id);
        return Response::ok({{"process", {{"id", process->id}, {"pid", process->pid}}}}, request.request_id, 201);
    }
    if (parsed->request.stdin_data) {
        parsed->request.stdin_open = true;
    }
    // Started here, so that what fails before the program runs (an unknown
    // user, a missing cwd) is an error status, not a stream.
    auto session = agent::ExecSession::start(**client, parsed->request);
    if (!session) {
        return Response::error(guest_error(session.error()), request.request_id);
    }
    auto state = std::make_shared<AttachedExec>(
        AttachedExec{*client, std::move(*session), std::move(parsed->request.stdin_data), *history_id});
    Response response;
    response.headers.emplace_back("Content-Type", "application/x-ndjson");
    response.stream = [state, &store = store_](http::BodyWriter& out) { stream_exec(*state, store, out); };
    return response;
}

}  // namespace sbx::sbxd

#include "guest-agent/exec/exec_client.hpp"

#include <charconv>
#include <thread>

namespace sbx::agent {
namespace {

constexpr std::string_view kFirstOffsetMark = " (first_offset ";

// An error message from the agent as an Error "<code>: <message>", like
// AgentClient::read_reply().
Error agent_error(const Json& message) {
    auto code = get_string(message, "code", "");
    auto text = get_string(message, "message", "");
    std::string out = fmt::format("{}: {}", code ? *code : "", text ? *text : "");
    auto first = message.find("first_offset");
    if (first != message.end() && first->is_number_unsigned()) {
        out += fmt::format("{}{})", kFirstOffsetMark, first->get<std::uint64_t>());
    }
    return make_error(std::move(out));
}

ExitInfo parse_exit(const Json& message) {
    ExitInfo exit;
    if (auto sig = message.find("signal"); sig != message.end() && sig->is_number_integer()) {
        exit.signal = sig->get<int>();
    } else if (auto code = message.find("code"); code != message.end() && code->is_number_integer()) {
        exit.code = code->get<int>();
    }
    auto timed_out = get_bool(message, "timed_out", false);
    exit.timed_out = timed_out && *timed_out;
    return exit;
}

std::uint64_t get_u64(const Json& message, std::string_view key) {
    auto it = message.find(key);
    return it != message.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

// Sends a request and reads the reply, which must be of `type`. Errors keep
// offset_gone's first_offset (AgentClient::call() would drop it).
Result<Json> call_expecting(AgentClient& client, std::string_view op, Json fields, std::string_view type) {
    if (auto r = client.send_request(op, std::move(fields)); !r) {
        return r.error();
    }
    auto reply = client.stream().read_message();
    if (!reply) {
        return reply;
    }
    if ((*reply)["type"] == "error") {
        return agent_error(*reply);
    }
    if ((*reply)["type"] != type) {
        return make_error("expected a \"{}\" message, got \"{}\"", type, reply->value("type", ""));
    }
    return reply;
}

}  // namespace

Json exec_fields(const ExecRequest& request, bool detach) {
    Json fields = Json::object();
    if (!request.shell.empty()) {
        fields["shell"] = request.shell;
    } else {
        fields["argv"] = request.argv;
    }
    if (!request.env.empty()) {
        fields["env"] = request.env;
    }
    if (!request.cwd.empty()) {
        fields["cwd"] = request.cwd;
    }
    if (!request.user.empty()) {
        fields["user"] = request.user;
    }
    if (request.stdin_data || request.stdin_open) {
        fields["stdin"] = true;
    }
    if (request.timeout.count() > 0) {
        fields["timeout_ms"] = request.timeout.count();
    }
    if (request.pty) {
        fields["pty"] = Json{{"rows", request.pty->rows}, {"cols", request.pty->cols}};
    }
    if (detach) {
        fields["detach"] = true;
    }
    return fields;
}

Result<ExecSession> ExecSession::start(AgentClient& client, const ExecRequest& request) {
    auto started = call_expecting(client, "exec", exec_fields(request, false), "started");
    if (!started) {
        return started.error();
    }
    auto pid = get_int(*started, "pid");
    return ExecSession(client.stream(), pid ? static_cast<int>(*pid) : 0);
}

Result<void> ExecSession::write_stdin(std::span<const std::uint8_t> bytes) {
    auto r = stream_->write_data(Channel::Stdin, stdin_offset_, bytes);
    stdin_offset_ += bytes.size();
    return r;
}

Result<void> ExecSession::close_stdin() {
    return stream_->write_eof(Channel::Stdin);
}

Result<void> ExecSession::signal(int sig) {
    return stream_->write_message(Json{{"type", "signal"}, {"signal", sig}});
}

Result<void> ExecSession::resize(int rows, int cols) {
    return stream_->write_message(Json{{"type", "resize"}, {"rows", rows}, {"cols", cols}});
}

Result<ExecSession::Event> ExecSession::next() {
    auto frame = stream_->read();
    if (!frame) {
        return frame.error();
    }
    Event event;
    switch (frame->kind) {
        case FrameKind::Data:
            event.kind = Event::Output;
            event.channel = frame->channel;
            event.offset = frame->offset;
            event.data = std::move(frame->data);
            return event;
        case FrameKind::Eof:
            event.kind = Event::Eof;
            event.channel = frame->channel;
            return event;
        case FrameKind::Json:
            break;
    }
    auto message = parse_message(frame->json);
    if (!message) {
        return message.error();
    }
    if ((*message)["type"] == "error") {
        return agent_error(*message);
    }
    if ((*message)["type"] != "exit") {
        return make_error("unexpected \"{}\" message during exec", message->value("type", ""));
    }
    event.kind = Event::Exit;
    event.exit = parse_exit(*message);
    return event;
}

Result<ExecResult> exec(AgentClient& client, const ExecRequest& request, const OutputSink& sink) {
    auto session = ExecSession::start(client, request);
    if (!session) {
        return session.error();
    }
    // Stdin goes from its own thread: the agent may have to send output
    // before it can take more input (`cat` of something large).
    std::thread feeder;
    if (request.stdin_data) {
        feeder = std::thread([&session, &request] {
            const auto* bytes = reinterpret_cast<const std::uint8_t*>(request.stdin_data->data());
            if (session->write_stdin(std::span(bytes, request.stdin_data->size()))) {
                [[maybe_unused]] auto r = session->close_stdin();
            }
        });
    }
    ExecResult result;
    result.pid = session->pid();
    Result<void> outcome = ok();
    while (true) {
        auto event = session->next();
        if (!event) {
            outcome = event.error();
            break;
        }
        if (event->kind == ExecSession::Event::Exit) {
            static_cast<ExitInfo&>(result) = event->exit;
            break;
        }
        if (event->kind != ExecSession::Event::Output) {
            continue;
        }
        if (sink) {
            sink(event->channel, event->offset, event->data);
            continue;
        }
        std::string& out = event->channel == Channel::Stderr ? result.stderr_data : result.stdout_data;
        const std::size_t room = kMaxCollectedOutput - std::min(out.size(), kMaxCollectedOutput);
        result.output_truncated |= event->data.size() > room;
        out.append(event->data.begin(),
                   event->data.begin() + static_cast<std::ptrdiff_t>(std::min(room, event->data.size())));
    }
    if (feeder.joinable()) {
        feeder.join();
    }
    if (!outcome) {
        return outcome.error();
    }
    return result;
}

Result<DetachedProcessRef> exec_detached(AgentClient& client, const ExecRequest& request) {
    auto reply = call_expecting(client, "exec", exec_fields(request, true), "result");
    if (!reply) {
        return reply.error();
    }
    auto id = get_string(*reply, "id");
    auto pid = get_int(*reply, "pid");
    if (!id || !pid) {
        return make_error("malformed reply to a detached exec");
    }
    return DetachedProcessRef{*id, static_cast<int>(*pid)};
}

Result<AttachResult> attach(AgentClient& client, std::string_view id, std::uint64_t offset, bool follow,
                            const OutputSink& sink) {
    auto attached = call_expecting(client, "proc_attach",
                                   Json{{"id", id}, {"offset", offset}, {"follow", follow}}, "attached");
    if (!attached) {
        return attached.error();
    }
    AttachResult result;
    result.offset = get_u64(*attached, "offset");
    FrameStream& stream = client.stream();
    while (true) {
        auto frame = stream.read();
        if (!frame) {
            return frame.error();
        }
        if (frame->kind == FrameKind::Data) {
            if (sink) {
                sink(frame->channel, frame->offset, frame->data);
            }
            continue;
        }
        if (frame->kind != FrameKind::Json) {
            continue;
        }
        auto message = parse_message(frame->json);
        if (!message) {
            return message.error();
        }
        if ((*message)["type"] == "error") {
            return agent_error(*message);
        }
        result.end_offset = get_u64(*message, "end_offset");
        auto running = get_bool(*message, "running", false);
        result.running = running && *running;
        if (!result.running) {
            result.exit = parse_exit(*message);
        }
        return result;
    }
}

std::optional<std::uint64_t> first_offset_of(const Error& offset_gone) {
    const std::string& m = offset_gone.message;
    auto at = m.rfind(kFirstOffsetMark);
    if (at == std::string::npos) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    const char* begin = m.data() + at + kFirstOffsetMark.size();
    auto [end, ec] = std::from_chars(begin, m.data() + m.size(), value);
    if (ec != std::errc()) {
        return std::nullopt;
    }
    return value;
}

Result<Json> proc_status(AgentClient& client, std::string_view id) {
    return call_expecting(client, "proc_status", Json{{"id", id}}, "result");
}

Result<Json> proc_list(AgentClient& client) {
    if (auto r = client.send_request("proc_list"); !r) {
        return r.error();
    }
    Json all = Json::array();
    while (true) {
        auto reply = client.stream().read_message();
        if (!reply) {
            return reply;
        }
        const std::string type = reply->value("type", "");
        if (type == "error") {
            return agent_error(*reply);
        }
        auto batch = reply->find("processes");
        if ((type != "processes" && type != "result") || batch == reply->end() || !batch->is_array()) {
            return make_error("unexpected reply to proc_list");
        }
        for (auto& entry : *batch) {
            all.push_back(std::move(entry));
        }
        if (type == "result") {
            (*reply)["processes"] = std::move(all);
            return reply;
        }
    }
}

Result<bool> proc_signal(AgentClient& client, std::string_view id, int sig) {
    auto reply = call_expecting(client, "proc_signal", Json{{"id", id}, {"signal", sig}}, "result");
    if (!reply) {
        return reply.error();
    }
    auto running = get_bool(*reply, "running", false);
    return running ? *running : false;
}

Result<void> proc_remove(AgentClient& client, std::string_view id) {
    auto reply = call_expecting(client, "proc_remove", Json{{"id", id}}, "result");
    if (!reply) {
        return reply.error();
    }
    return ok();
}

}  // namespace sbx::agent

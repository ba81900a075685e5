// GET /v1/sandboxes/{id}/exec/ws: an attached exec over a WebSocket
// (docs/api.md, "Exec over a WebSocket"), for stdin streamed as it is
// typed and a pty with resizes. After the handshake everything, even an
// unknown sandbox, is a message and a close code (ws_exec.hpp). One
// thread (the connection's) relays the agent's output and waits in
// WsChannel::send() while the client reads slowly, so the agent's
// connection and then the process block; another relays the client's
// messages to the agent.
#include <sys/socket.h>

#include <thread>

#include "guest-agent/exec/exec_client.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"
#include "host-tools/sbxd/daemon/ws_exec.hpp"

namespace sbx::sbxd {

namespace {

using http::WsChannel;
using http::WsMessage;

// The client's messages after the first, to the agent, until the channel
// ends. Binary frames are stdin (dropped after an eof); text frames are
// control messages. A bad one closes the connection.
void relay_input(WsChannel& channel, agent::ExecSession& session, int agent_fd,
                 const std::string& request_id) {
    bool stdin_open = true;
    while (true) {
        auto message = channel.receive();
        if (!message) {
            return;
        }
        if (!message->text) {
            if (stdin_open && !message->data.empty()) {
                const auto* bytes = reinterpret_cast<const std::uint8_t*>(message->data.data());
                if (!session.write_stdin(std::span(bytes, message->data.size()))) {
                    return;
                }
            }
            continue;
        }
        auto control = read_ws_control(message->data);
        if (!control) {
            ws_fail(channel, control.error(), request_id);
            ::shutdown(agent_fd, SHUT_RDWR);  // ends the output relay's wait, and the process
            return;
        }
        Result<void> sent = ok();
        switch (control->kind) {
            case WsControl::Resize:
                sent = session.resize(control->rows, control->cols);
                break;
            case WsControl::Signal:
                sent = session.signal(control->signal);
                break;
            case WsControl::Eof:
                if (stdin_open) {
                    stdin_open = false;
                    sent = session.close_stdin();
                }
                break;
        }
        if (!sent) {
            return;
        }
    }
}

}  // namespace

http::Response GuestRoutes::exec_ws(const Request& request, const PathParams& params) const {
    http::Response response;
    response.status = 101;
    response.websocket = [this, id = params.at("id"), request_id = request.request_id,
                          key = request.principal.key()](WsChannel& channel) { serve_ws_exec(id, request_id, key, channel); };
    return response;
}

void GuestRoutes::serve_ws_exec(const std::string& id, const std::string& request_id,
                                const std::optional<std::string>& key, WsChannel& channel) const {
    auto first = channel.receive(WsChannel::Clock::now() + kWsFirstMessageTimeout);
    if (!first) {
        if (first.error().code == "timeout") {
            Error late{fmt::format("no exec request within {} s", kWsFirstMessageTimeout.count()), 0,
                       std::string(api::code::kBadRequest)};
            [[maybe_unused]] auto r = channel.send(ws_error(late, request_id));
            channel.close(http::WsClose{http::ws_close::kApplicationBase + 408, "timeout"});
        }
        return;
    }
    auto parsed = read_ws_start(*first);
    if (!parsed) {
        return ws_fail(channel, parsed.error(), request_id);
    }
    auto client = connect(id);
    if (!client) {
        return ws_fail(channel, client.error(), request_id);
    }
    auto history_id = store_.add_exec(id, parsed->command.dump(), clock_(), key);
    if (!history_id) {
        return ws_fail(channel, history_id.error(), request_id);
    }
    auto session = agent::ExecSession::start(**client, parsed->request);
    if (!session) {
        return ws_fail(channel, guest_error(session.error()), request_id);
    }
    // A client that leaves ends the agent connection, which kills the
    // process group (docs/agent-protocol.md, exec).
    const int agent_fd = (*client)->stream().fd();
    auto hook = channel.on_gone([agent_fd] { ::shutdown(agent_fd, SHUT_RDWR); });
    if (!channel.send(WsMessage{true, nlohmann::json{{"type", "start"}, {"pid", session->pid()}}.dump()})) {
        return;
    }
    std::thread input([&] { relay_input(channel, *session, agent_fd, request_id); });
    while (true) {
        auto event = session->next();
        if (!event) {
            if (!channel.gone()) {
                ws_fail(channel, guest_error(event.error()), request_id);
            }
            break;
        }
        if (event->kind == agent::ExecSession::Event::Exit) {
            [[maybe_unused]] auto r =
                store_.finish_exec(*history_id, history_exit_code(event->exit.code, event->exit.signal));
            [[maybe_unused]] auto s = channel.send(WsMessage{true, exit_event(event->exit).dump()});
            channel.close(http::WsClose{http::ws_close::kNormal, ""});
            break;
        }
        if (event->kind != agent::ExecSession::Event::Output) {
            continue;
        }
        auto stream = event->channel == agent::Channel::Stderr ? kWsStderr : kWsStdout;
        if (!channel.send(ws_output(stream, event->data))) {
            break;  // the client left, or input closed the connection for a bad message
        }
    }
    // The input relay may wait on the agent (a full stdin) or on the client:
    // the connection to the agent is done with either way.
    channel.close(http::WsClose{http::ws_close::kNormal, ""});
    ::shutdown(agent_fd, SHUT_RDWR);
    input.join();
}

}  // namespace sbx::sbxd

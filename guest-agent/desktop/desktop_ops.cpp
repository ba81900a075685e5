// The desktop ops (docs/agent-protocol.md, "Desktop"): desktop_start,
// desktop_status and desktop_action over the agent's one DesktopService,
// which the handlers share (it lives as long as the op table).
#include <algorithm>

#include "guest-agent/agent/agent.hpp"
#include "guest-agent/desktop/desktop_service.hpp"
#include "guest-agent/exec/exec_ops.hpp"

namespace sbx::agent {
namespace {

// An error with a code of its own is sent with it; others as exec's are
// (by errno: an unknown user is not_found).
Result<void> reply_failure(Session& session, const Error& error) {
    if (error.code.empty()) {
        return reply_error(session, error);
    }
    return session.stream().write_message(error_message(error.code, error.to_string()));
}

// An image as a download: DATA on channel 3, EOF, then the result.
Result<void> send_image(Session& session, const ActionResult& result) {
    auto& stream = session.stream();
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(result.png.data());
    for (std::size_t at = 0; at < result.png.size(); at += kMaxDataPayload) {
        const std::size_t n = std::min(kMaxDataPayload, result.png.size() - at);
        if (auto r = stream.write_data(Channel::Content, at, std::span(bytes + at, n)); !r) {
            return r;
        }
    }
    if (auto r = stream.write_eof(Channel::Content); !r) {
        return r;
    }
    Json reply = result.fields;
    reply["type"] = "result";
    return stream.write_message(reply);
}

}  // namespace

void register_desktop_ops(OpTable& ops) {
    auto service = std::make_shared<DesktopService>();
    ops.emplace("desktop_start", [service](Session& session, const Json& request) -> Result<void> {
        auto desktop = parse_start_request(request);
        if (!desktop) {
            return reply_failure(session, desktop.error());
        }
        auto started = service->start(session.agent().processes(), session.agent().options(), *desktop);
        if (!started) {
            return reply_failure(session, started.error());
        }
        const auto& [status, fresh] = *started;
        Json reply = status_fields(status);
        reply.erase("running");
        reply.erase("session_running");
        reply["type"] = "result";
        reply["started"] = fresh;
        return session.stream().write_message(reply);
    });
    ops.emplace("desktop_status", [service](Session& session, const Json&) -> Result<void> {
        Json reply = status_fields(service->status());
        reply["type"] = "result";
        return session.stream().write_message(reply);
    });
    ops.emplace("desktop_action", [service](Session& session, const Json& request) -> Result<void> {
        auto result = service->act(session.agent().options(), request);
        if (!result) {
            return reply_failure(session, result.error());
        }
        if (!result->png.empty()) {
            return send_image(session, *result);
        }
        Json reply = result->fields;
        reply["type"] = "result";
        return session.stream().write_message(reply);
    });
}

}  // namespace sbx::agent

#include "guest-agent/freeze/freeze_client.hpp"

namespace sbx::agent {
namespace {

// The reply's list of mount points: strings, at most a frame's worth.
Result<std::vector<std::string>> mount_list(const Json& reply, std::string_view field) {
    auto it = reply.find(field);
    if (it == reply.end() || !it->is_array()) {
        return make_error("{}: the reply has no \"{}\" list", field == "frozen" ? "freeze" : "thaw", field);
    }
    std::vector<std::string> out;
    for (const auto& point : *it) {
        if (!point.is_string()) {
            return make_error("the reply's \"{}\" holds a non-string", field);
        }
        out.push_back(point.get<std::string>());
    }
    return out;
}

}  // namespace

Result<std::vector<std::string>> freeze_filesystems(AgentClient& client, std::chrono::milliseconds timeout) {
    auto reply = client.call("freeze", Json{{"timeout_ms", timeout.count()}});
    if (!reply) {
        return reply.error();
    }
    return mount_list(*reply, "frozen");
}

Result<std::vector<std::string>> thaw_filesystems(AgentClient& client) {
    auto reply = client.call("thaw");
    if (!reply) {
        return reply.error();
    }
    return mount_list(*reply, "thawed");
}

}  // namespace sbx::agent

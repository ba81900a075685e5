// The health op (docs/agent-protocol.md, "health"): boot id, uptime,
// memory and root file system figures, read from /proc and statvfs; the
// identity generation and vsock CID (identity_state.hpp).
#include <sys/statvfs.h>

#include <fstream>
#include <sstream>

#include "guest-agent/agent/agent.hpp"
#include "guest-agent/identity/identity_state.hpp"

namespace sbx::agent {
namespace {

// "MemTotal:  123 kB" lines of /proc/meminfo, in bytes.
Json meminfo() {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    std::uint64_t value = 0;
    Json out = Json::object();
    while (in >> key >> value) {
        std::getline(in, unit);
        if (key == "MemTotal:") {
            out["total"] = value * 1024;
        } else if (key == "MemAvailable:") {
            out["available"] = value * 1024;
        }
    }
    return out;
}

double uptime_seconds() {
    std::ifstream in("/proc/uptime");
    double up = 0;
    in >> up;
    return up;
}

Json disk(const char* path) {
    struct statvfs s {};
    if (::statvfs(path, &s) != 0) {
        return nullptr;
    }
    return Json{{"path", path},
                {"total", static_cast<std::uint64_t>(s.f_blocks) * s.f_frsize},
                {"available", static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize}};
}

Result<void> health(Session& session, const Json&) {
    Agent& agent = session.agent();
    auto cid = agent.identity().cid(session.stream().fd());
    return session.stream().write_message(Json{{"type", "result"},
                                               {"agent", kAgentVersion},
                                               {"version", kProtocolVersion},
                                               {"boot_id", agent.boot_id()},
                                               {"uptime_s", uptime_seconds()},
                                               {"memory", meminfo()},
                                               {"disk", disk("/")},
                                               {"sessions", agent.active_sessions()},
                                               {"authenticated", agent.door().has_token()},
                                               {"generation", agent.identity().generation()},
                                               {"cid", cid ? Json(*cid) : Json(nullptr)}});
}

}  // namespace

void register_health_ops(OpTable& ops) { ops.emplace("health", health); }

}  // namespace sbx::agent

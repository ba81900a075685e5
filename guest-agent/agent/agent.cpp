#include "guest-agent/agent/agent.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/atomic_file.hpp"
#include "base/log.hpp"
#include "guest-agent/exec/process_table.hpp"
#include "guest-agent/freeze/freeze_state.hpp"
#include "guest-agent/identity/identity_fields.hpp"
#include "guest-agent/identity/identity_state.hpp"

namespace sbx::agent {
namespace {

std::string read_boot_id() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return id;
}

}  // namespace

std::string token_from_cmdline(std::string_view cmdline) {
    std::istringstream words{std::string(cmdline)};
    std::string word;
    constexpr std::string_view kKey = "sbx.token=";
    while (words >> word) {
        if (word.starts_with(kKey)) {
            return word.substr(kKey.size());
        }
    }
    return {};
}

Result<void> keep_token(const std::string& path, const std::string& token) {
    const std::string dir = std::filesystem::path(path).parent_path().string();
    if (!dir.empty() && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        return sys_error("mkdir {}", dir);
    }
    return write_file_atomically(path, token + "\n", 0600);
}

std::optional<std::string> kept_token(const std::string& path) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text)) {
        return std::nullopt;
    }
    auto token = check_token(text);  // what the identity op accepts, no more
    return token ? std::optional<std::string>(std::move(*token)) : std::nullopt;
}

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      boot_id_(read_boot_id()),
      processes_(std::make_unique<ProcessTable>()),
      identity_(std::make_unique<IdentityState>(options_.identity_kernel ? options_.identity_kernel
                                                                         : make_system_identity_kernel())),
      freeze_(std::make_unique<FreezeState>(options_.freeze_kernel ? options_.freeze_kernel
                                                                   : make_refusing_freeze_kernel())),
      door_(std::move(options_.token), options_.limits) {
    options_.token.clear();  // one copy, in the door: the identity op may replace it
    register_exec_ops(ops_);
    register_file_ops(ops_);
    register_tar_ops(ops_);
    register_forward_ops(ops_);
    register_health_ops(ops_);
    register_identity_ops(ops_);
    register_freeze_ops(ops_);
    register_desktop_ops(ops_);
    if (!door_.has_token()) {
        log::warn("no sbx.token on the kernel command line: any client that reaches the agent is served");
    }
}

Agent::~Agent() = default;

bool Agent::handshake(FrameStream& stream, Door::Ticket& ticket) {
    auto hello = stream.read_message();
    if (!hello) {
        if (!is_closed(hello.error())) {
            [[maybe_unused]] auto r = stream.write_message(error_message(code::kBadFrame, hello.error().to_string()));
        }
        return false;
    }
    auto fail = [&](std::string_view error_code, std::string_view message) {
        [[maybe_unused]] auto r = stream.write_message(error_message(error_code, message));
        return false;
    };
    if ((*hello)["type"] != "hello") {
        return fail(code::kBadRequest, "the first message must be a hello");
    }
    auto version = get_int(*hello, "version");
    auto token = get_string(*hello, "token", std::string());
    if (!version || !token) {
        return fail(code::kBadRequest, (!version ? version.error() : token.error()).to_string());
    }
    if (!door_.token_matches(*token)) {
        return fail(code::kUnauthorized, "wrong or missing token");
    }
    if (*version < 1) {
        return fail(code::kUnsupportedVersion, fmt::format("this agent speaks version {}", kProtocolVersion));
    }
    switch (door_.authenticate(ticket)) {
    case Door::Admission::admitted:
        break;
    case Door::Admission::full:
        return fail(code::kLimit, fmt::format("the agent serves at most {} sessions", door_.limits().max_sessions));
    case Door::Admission::closed:
        return false;  // shut down: its hello deadline passed, or it was evicted
    }
    auto r = stream.write_message(Json{{"type", "hello"},
                                       {"version", std::min<std::int64_t>(*version, kProtocolVersion)},
                                       {"agent", kAgentVersion},
                                       {"boot_id", boot_id_}});
    return r.has_value();
}

void Agent::serve(UniqueFd connection) {
    FrameStream stream(std::move(connection));
    // Declared after the stream: the ticket leaves the door before the fd closes.
    Door::Ticket ticket = door_.arrive(stream.fd());
    Session session(*this, stream);
    if (handshake(stream, ticket)) {
        while (!session.finished()) {
            auto frame = stream.read();
            if (!frame) {
                if (!is_closed(frame.error())) {
                    [[maybe_unused]] auto r =
                        stream.write_message(error_message(code::kBadFrame, frame.error().to_string()));
                }
                break;
            }
            if (frame->kind != FrameKind::Json) {
                // Stray data between requests (e.g. after an op that failed
                // early): ignored, the client learned of the failure already.
                continue;
            }
            auto request = parse_message(frame->json);
            if (!request) {
                if (!stream.write_message(error_message(code::kBadRequest, request.error().to_string()))) {
                    break;
                }
                continue;
            }
            if ((*request)["type"] == "signal" || (*request)["type"] == "resize" || (*request)["type"] == "cancel") {
                // An exec's control message that crossed its exit on the
                // wire, or an upload's cancel that crossed its error reply:
                // too late to matter, and no reply is owed.
                continue;
            }
            auto op = get_string(*request, "op");
            if ((*request)["type"] != "request" || !op) {
                if (!stream.write_message(error_message(code::kBadRequest, "expected {\"type\":\"request\",\"op\":...}"))) {
                    break;
                }
                continue;
            }
            auto handler = ops_.find(*op);
            if (handler == ops_.end()) {
                if (!stream.write_message(error_message(code::kUnknownOp, fmt::format("unknown op \"{}\"", *op)))) {
                    break;
                }
                continue;
            }
            if (auto r = handler->second(session, *request); !r) {
                if (!stream.write_message(error_message(r.error()))) {
                    break;
                }
            }
        }
    }
}

}  // namespace sbx::agent

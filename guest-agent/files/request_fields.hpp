// Fields shared by the file ops' requests (docs/agent-protocol.md,
// "Files"): guest paths, permission modes and owners. The agent is a
// static binary, so user names come from parsing /etc/passwd, not NSS.
#pragma once

#include <optional>

// frame_stream.hpp, not messages.hpp alone: messages.hpp before frame.hpp
// makes FrameKind::Json shadow the Json alias (-Wshadow).
#include "guest-agent/protocol/frame_stream.hpp"

namespace sbx::agent::files {

// A guest path: a non-empty absolute path without NUL bytes.
[[nodiscard]] Result<std::string> get_path(const Json& request, std::string_view key);
// Permission bits, 0 to 07777.
[[nodiscard]] Result<std::uint32_t> get_mode(const Json& request, std::string_view key,
                                             std::uint32_t fallback);

// Who owns what an op creates; unset parts stay the agent's (root).
struct Owner {
    std::optional<std::uint32_t> uid;
    std::optional<std::uint32_t> gid;
    [[nodiscard]] bool any() const { return uid || gid; }
};
// From "user" (a name or a uid, looked up in /etc/passwd: its uid and
// primary gid) and "uid"/"gid" (numbers, which win over the user's); a
// request with none of them: `default_user`'s (the agent's own for root).
[[nodiscard]] Result<Owner> get_owner(const Json& request, const std::string& default_user = "root",
                                      const std::string& passwd_path = "/etc/passwd");

struct PasswdEntry {
    std::string name;
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
};
// The /etc/passwd line for a user name or a decimal uid; a name not there
// is ENOENT, a uid not there has the same number as its group.
[[nodiscard]] Result<PasswdEntry> find_user(std::string_view name_or_uid, const std::string& passwd_path);

// fchown(2) to the owner's set parts; nothing when none is set.
[[nodiscard]] Result<void> apply_owner(int fd, const Owner& owner);

}  // namespace sbx::agent::files

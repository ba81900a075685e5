// The API inside a sandbox (docs/sbxd.md, "The API inside a sandbox"):
// the guest reaches sbxd only over vsock. At every start of a sandbox
// (create, resume, fork, adoption after a restart) sbxd writes
// /etc/sandboxer/env with the sandbox's identity and a key scoped to it,
// and asks the agent to listen on kGuestApiAddress:kGuestApiPort and join
// each connection to host vsock port kGuestApiPort; the VMM delivers those
// at "<vsock uds>_<port>", a hard link to sbxd's one guest-API socket
// (Transport::Guest: every request needs the bearer key).
#pragma once

#include <cstdint>
#include <string>

#include "host-tools/sbxd/daemon/views.hpp"  // sandbox_subdomain, sandbox_hostname
#include "host-tools/sbxd/store/records.hpp"

namespace sbx::sbxd {

inline constexpr const char* kGuestApiAddress = "127.0.0.1";
inline constexpr std::uint16_t kGuestApiPort = 7070;
inline constexpr const char* kGuestEnvPath = "/etc/sandboxer/env";

// /etc/sandboxer/env's text (format: images/README.md, one KEY=VALUE per
// line, literal): SANDBOXER_ID, SANDBOXER_SUBDOMAIN, SANDBOXER_API_URL,
// SANDBOXER_TOKEN, then the operator's defaults (none with noEnv), then
// the sandbox's own variables, which win over a default of the same name.
[[nodiscard]] std::string guest_env_file(const SandboxRecord& sandbox, const std::string& token,
                                         const StringMap& operator_defaults);

}  // namespace sbx::sbxd

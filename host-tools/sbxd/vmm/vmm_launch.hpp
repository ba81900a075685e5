// Starting and ending one sandbox's sbx-vmm: the command line of a cold
// boot (kernel, the sandbox's disk overlay, the token on the kernel
// command line) or of a restore (a raw memory snapshot mapped
// copy-on-write, docs/vmm-control.md "Restore", with the host side of
// each saved device from the flags), waiting until the guest's agent
// answers, giving a restored guest its new identity, and stopping.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "base/cgroup.hpp"
#include "base/result.hpp"
#include "host-tools/sbxd/store/records.hpp"
#include "host-tools/sbxd/vmm/sandbox_files.hpp"

namespace sbx::sbxd {

// The guest's network card: the sandbox's tap on the host and the MAC
// the guest gets (docs/network.md).
struct NetAttachment {
    std::string tap;
    std::string mac;
};

// What a started guest is told through the identity op (identity op,
// docs/agent-protocol.md): its network (the agent sets the MAC, the
// address, the default route and /etc/resolv.conf).
struct GuestNetwork {
    std::string mac;
    std::string address;  // "10.231.0.6/30"
    std::string gateway;
    std::vector<std::string> dns;
};

struct LaunchSpec {
    std::string vmm_program;
    std::uint32_t cid = 0;
    // Cold boot: the kernel, the machine, and the token the agent takes
    // from the kernel command line (sbx.token=).
    std::string kernel;
    int cpus = 1;
    int memory_mib = 512;
    std::string token;
    // Restore instead: the snapshot (the machine comes from it; `token` is
    // then the one the saved guest already has).
    std::optional<std::string> restore_from;
    std::optional<NetAttachment> net{};  // none: no network card
    // A cgroup v2 directory to start the VMM in, with these limits (made
    // here; empty: none). Removed again when the start fails.
    std::string cgroup{};
    CgroupLimits cgroup_limits{};
    // Jailed in the folder's vmm/ as this uid and gid (sbx-vmm --jail); none: not jailed.
    std::optional<std::uint32_t> jail_uid{};
    // The console log stays under this many bytes (sbx-vmm
    // --console-max-bytes: its oldest half dropped); 0: no bound.
    std::uint64_t console_max_bytes = 0;
};

// The sbx-vmm arguments for `spec` in the sandbox's folder.
[[nodiscard]] std::vector<std::string> vmm_arguments(const LaunchSpec& spec, const SandboxFiles& files);

// Spawns the VMM (its own session, output to vmm.log) and records it in
// vmm.json before anything else can fail. Makes the folder's vmm/ first
// (the jailed uid's).
[[nodiscard]] Result<VmmProcess> launch_vmm(const LaunchSpec& spec, const SandboxFiles& files);

// Polls the agent's health through the vsock socket until it answers or
// the deadline passes; fails at once when the VMM ends (the error then
// has its exit and the end of its log) or the token is refused.
[[nodiscard]] Result<void> wait_for_agent(const VmmProcess& vmm, const SandboxFiles& files,
                                          const std::string& token, std::chrono::milliseconds timeout,
                                          std::stop_token stop = {});

// The identity op (docs/agent-protocol.md "identity"), on the connection
// `token` opens: on a restored guest a new token (`new_token`), and with a
// generation a fresh RNG seed too (a fork); on any guest with a network,
// its MAC, address, route and DNS; on every started guest its host name
// (sandbox_hostname, guest_api.hpp).
struct IdentityUpdate {
    std::optional<std::string> new_token;
    std::optional<std::uint64_t> generation;
    std::optional<GuestNetwork> network;
    std::optional<std::string> hostname{};
};
[[nodiscard]] Result<void> give_identity(const SandboxFiles& files, const std::string& token,
                                         const IdentityUpdate& update);

// The freeze op (docs/agent-protocol.md "freeze, thaw") before a guest's
// memory is saved or it stops, so that its disk alone holds every write
// (and a stopped sandbox's files can be read from it); the guest thaws by
// itself after `timeout`. Returns the mount points frozen.
[[nodiscard]] Result<std::vector<std::string>> freeze_guest(
    const SandboxFiles& files, const std::string& token,
    std::chrono::milliseconds timeout = std::chrono::seconds(60));
// The thaw op, after a restore: the snapshot may have been taken frozen.
// Nothing frozen is no error.
[[nodiscard]] Result<void> thaw_guest(const SandboxFiles& files, const std::string& token);

// The `snapshot` op (raw) of the running VMM into its vmm/ (where a
// jailed VMM may write), then that file (a regular file only, made
// sbxd's) linked to files.memory(); on failure the VM stays paused and
// nothing is left at either name.
[[nodiscard]] Result<void> save_memory(const VmmProcess& vmm, const SandboxFiles& files,
                                       std::chrono::milliseconds timeout);

// Ends the VMM: the control socket's stop, then SIGKILL to its group if it
// has not exited within `grace`. Returns once it is gone.
void stop_vmm(const VmmProcess& vmm, std::chrono::milliseconds grace = std::chrono::seconds(20));

}  // namespace sbx::sbxd

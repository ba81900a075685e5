// The identity op's "ipv4" applied to the virtio-net interface through
// IdentityKernel (docs/agent-protocol.md, "identity"), and what the kernel
// has afterwards, read back for the reply.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "guest-agent/identity/identity_kernel.hpp"
#include "guest-agent/identity/ipv4_fields.hpp"

namespace sbx::agent {

// What apply_ipv4 changed (for the agent's log).
struct Ipv4Changes {
    bool link_brought_up = false;
    std::vector<Ipv4Prefix> addresses_removed;
    std::vector<DefaultRoute> routes_removed;
    bool resolv_conf_written = false;
    std::optional<std::string> resolv_conf_link;  // the symbolic link the file replaced
};

// In this order, each step idempotent, so a call that fails part-way can be
// repeated whole: the link up (IFF_UP, if it is not); every IPv4 address of
// the interface other than `config.address` deleted, then that one added or
// kept (deleting first: removing a primary address also removes the
// secondaries of its subnet); the main table's default route of metric 0
// replaced by one via the gateway on the interface, then every other
// default route of the main table deleted; with `config.dns`, the resolver
// file rewritten unless it already is a regular file with exactly that
// text. A symbolic link there (e.g. to systemd-resolved's stub file) is
// replaced by the file: the host's DNS is the sandbox's, and a resolver
// that nothing configures would not know it.
[[nodiscard]] Result<Ipv4Changes> apply_ipv4(IdentityKernel& kernel, const std::string& ifname,
                                             const Ipv4Config& config);

// The interface's state now (Ipv4State, ipv4_fields.hpp).
[[nodiscard]] Result<Ipv4State> read_ipv4(IdentityKernel& kernel, const std::string& ifname);
// "eth0 10.231.0.6/30 via 10.231.0.5 (...)": one log line.
[[nodiscard]] std::string describe_changes(const std::string& ifname, const Ipv4Config& config,
                                           const Ipv4Changes& changes);

}  // namespace sbx::agent

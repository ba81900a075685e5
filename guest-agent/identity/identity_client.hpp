// The host side of the identity op (docs/agent-protocol.md, "identity"):
// after booting or restoring a fork, give its guest a fresh RNG seed, its
// MAC address, its IPv4 network, its host name, a generation number and
// its own token; with no fields, ask what they are.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "guest-agent/client/agent_client.hpp"
#include "guest-agent/identity/ipv4_fields.hpp"

namespace sbx::agent {

struct IdentityRequest {
    std::optional<std::uint64_t> generation;
    std::vector<std::uint8_t> seed;  // empty: no reseed; else kMinSeedBytes..kMaxSeedBytes
    std::optional<std::string> mac;  // "aa:bb:cc:dd:ee:ff"
    // The agent's new token (kMinTokenDigits..kMaxTokenDigits lower-case hex,
    // e.g. random_token()): later hellos need it, this connection stays.
    std::optional<std::string> token;
    // The sandbox's network (parse_ipv4_settings builds one from text): the
    // virtio-net interface gets exactly this address and default route, and
    // with `dns` the guest's /etc/resolv.conf; nothing: left alone.
    std::optional<Ipv4Config> ipv4;
    // The guest's host name (check_hostname, RFC 1123): the kernel's,
    // /etc/hostname and /etc/hosts' 127.0.1.1 line; nothing: left alone.
    std::optional<std::string> hostname;
};

// The agent's reply, checked (the guest is untrusted); `raw` is the whole message.
struct IdentityReply {
    std::uint64_t generation = 0;
    std::optional<std::uint32_t> cid;
    std::optional<std::string> mac;
    std::optional<std::string> interface;
    std::string boot_id;
    bool reseeded = false;
    bool link_restarted = false;
    bool token_replaced = false;
    // The interface's IPv4 settings as the agent read them back after the
    // call (nothing: no interface, or an agent without the field).
    std::optional<Ipv4State> ipv4;
    bool ipv4_configured = false;
    // The kernel's host name after the call (nothing: an agent without the field).
    std::optional<std::string> hostname;
    Json raw;
};

// Checks the request locally first (seed size, MAC and token syntax, the
// IPv4 rules): a bad one is an Error without a round trip. With a token, a
// reply that does not confirm the replacement is an Error (the old token
// still works); with ipv4, so is a reply whose read-back state is not the
// one asked for (check_ipv4_state), or that has none (an older agent); with
// a hostname, a reply naming another one (a reply without the field, from
// an agent older than the field, is taken: `hostname` is then empty).
[[nodiscard]] Result<IdentityReply> identity(AgentClient& client, const IdentityRequest& request);

// `bytes` random bytes from the host's getrandom(2), for IdentityRequest::seed.
[[nodiscard]] Result<std::vector<std::uint8_t>> random_seed(std::size_t bytes = 64);
// A new token: `bytes` random bytes from getrandom(2) as lower-case hex.
[[nodiscard]] Result<std::string> random_token(std::size_t bytes = 16);

// The reply's fields from a result message.
[[nodiscard]] Result<IdentityReply> parse_identity_reply(const Json& reply);

}  // namespace sbx::agent

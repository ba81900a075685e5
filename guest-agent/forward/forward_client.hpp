// The host side of port forwarding (docs/agent-protocol.md, "Port
// forwarding"): a raw TCP stream into the guest (connect_tcp), a host
// listener forwarding each connection into the guest ("sbx forward
// LOCAL:REMOTE"), and the reverse, a host service made reachable inside
// the guest (listen_tcp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "guest-agent/client/agent_client.hpp"

namespace sbx::agent {

// A TCP connection to a guest address, carried by an agent connection.
struct GuestStream {
    UniqueFd fd;  // raw bytes both ways; shutdown(SHUT_WR) passes a half-close on
    // Bytes from the guest that arrived together with the agent's reply
    // (a server that speaks first): they come before anything read from fd.
    std::vector<std::uint8_t> received;
};

// Sends connect_tcp on an authenticated connection and, once the agent
// connected, hands the connection over as a raw stream. Errors carry the
// agent's code (error_code(): connect_failed, bad_request); the
// connection is consumed either way.
[[nodiscard]] Result<GuestStream> open_tcp(AgentClient client, std::string_view guest_host, std::uint16_t port);
// The same over a new connection to the agent.
[[nodiscard]] Result<GuestStream> open_tcp(const AgentEndpoint& endpoint, std::string_view guest_host,
                                           std::uint16_t port);

// Concurrent forwarded connections per forwarder; more are refused (reset).
inline constexpr std::size_t kMaxForwardedConnections = 256;

// A host TCP listener whose every connection is forwarded to a guest
// address through its own agent connection. Runs on its own threads until
// stop() (or destruction), which also ends the connections it carries
// (one still being opened is waited for: at most the endpoint's timeout
// plus the agent's 30 s connect timeout). A connection whose forward
// cannot be opened is reset, and the reason logged.
class PortForwarder {
public:
    // `local_port` 0: the kernel picks one (see local_port()).
    [[nodiscard]] static Result<PortForwarder> start(AgentEndpoint endpoint, std::string_view listen_host,
                                                     std::uint16_t local_port, std::string guest_host,
                                                     std::uint16_t guest_port);
    [[nodiscard]] std::uint16_t local_port() const;
    void stop();

    PortForwarder(PortForwarder&&) noexcept;
    PortForwarder& operator=(PortForwarder&&) noexcept;
    ~PortForwarder();

    struct State;

private:
    explicit PortForwarder(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

// listen_tcp alone: the agent listens at a guest address and joins each
// guest connection through the VMM to host vsock port `vsock_port`, which
// arrives at "<uds_path>_<vsock_port>" — a Unix listener the caller
// provides (before this, so the first connection finds it). The guest
// listener lives as long as `control` stays open.
struct GuestListener {
    AgentClient control;
    std::uint16_t guest_port = 0;  // the port the guest listener is bound to
};
[[nodiscard]] Result<GuestListener> listen_in_guest(const AgentEndpoint& endpoint, std::string_view guest_host,
                                                    std::uint16_t guest_port, std::uint32_t vsock_port);
// The same on a connection the caller opened (and keeps open as the
// listener's life): the port the guest listener is bound to.
[[nodiscard]] Result<std::uint16_t> listen_in_guest(AgentClient& control, std::string_view guest_host,
                                                    std::uint16_t guest_port, std::uint32_t vsock_port);

// Makes a host TCP service reachable inside the guest: the agent listens
// at a guest address (listen_tcp) for as long as this object keeps its
// connection open, and joins each guest connection through the VMM to
// host vsock port `vsock_port`, delivered here at "<uds_path>_<vsock_port>";
// each is then joined to the host address `target_host:target_port`.
// `vsock_port` must be unique among the forwards of one VM (its socket
// path is replaced). If the agent connection ends (the guest went away),
// no more connections arrive; stop() still has to be called.
class ReverseForwarder {
public:
    // `guest_port` 0: the agent picks one (see guest_port()).
    [[nodiscard]] static Result<ReverseForwarder> start(AgentEndpoint endpoint, std::string_view guest_host,
                                                        std::uint16_t guest_port, std::uint32_t vsock_port,
                                                        std::string_view target_host, std::uint16_t target_port);
    // The port the guest listener is bound to.
    [[nodiscard]] std::uint16_t guest_port() const;
    // Closes the guest listener and ends the joined connections.
    void stop();

    ReverseForwarder(ReverseForwarder&&) noexcept;
    ReverseForwarder& operator=(ReverseForwarder&&) noexcept;
    ~ReverseForwarder();

    struct State;

private:
    explicit ReverseForwarder(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

}  // namespace sbx::agent

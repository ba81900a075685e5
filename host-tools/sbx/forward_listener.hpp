// A local forward (docs/sbx.md, `sbx forward ID LOCAL:REMOTE`): a listener
// on 127.0.0.1 whose every connection is carried to a port of the sandbox
// over its own sbxd TCP WebSocket (tcp_bridge.hpp), each on a thread of
// its own (at most agent::kMaxForwardedConnections), until the forward is
// destroyed, which ends every carried connection and joins every thread.
// Used by `sbx forward` and by `sbx mcp`'s forward tool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "base/event_fd.hpp"
#include "base/unique_fd.hpp"
#include "host-tools/sbx/commands.hpp"
#include "host-tools/sbx/ws_client.hpp"

namespace sbx::cli {

// A WebSocket to sbxd, or why not (explained for the user).
struct OpenedWs {
    std::unique_ptr<WsExecClient> client;
    std::optional<Failure> failure;
};
[[nodiscard]] OpenedWs open_ws(const Context& ctx, const std::string& ws_target);

class ForwardListener {
public:
    // Told about each connection that could not be carried.
    using FailureReport = std::function<void(const std::string& what, const std::string& why)>;

    // Listens on 127.0.0.1:local_port (0: the kernel picks one) after
    // checking that the sandbox exists. Errors: the API's, or "local".
    [[nodiscard]] static Result<std::unique_ptr<ForwardListener>> start(const Context& ctx, std::string id,
                                                                         std::uint16_t local_port,
                                                                         std::uint16_t remote_port,
                                                                         FailureReport report);
    ~ForwardListener();
    ForwardListener(const ForwardListener&) = delete;
    ForwardListener& operator=(const ForwardListener&) = delete;

    [[nodiscard]] const std::string& id() const { return id_; }
    [[nodiscard]] std::uint16_t local_port() const { return local_port_; }
    [[nodiscard]] std::uint16_t remote_port() const { return remote_port_; }
    [[nodiscard]] std::string local_address() const;

private:
    ForwardListener(const Context& ctx, std::string id, UniqueFd listener, std::uint16_t local_port,
                    std::uint16_t remote_port, EventFd stop, FailureReport report);
    void accept_loop();

    const Context& ctx_;
    const std::string id_;
    UniqueFd listener_;
    const std::uint16_t local_port_;
    const std::uint16_t remote_port_;
    EventFd stop_;  // readable: stop accepting, and end every carried connection
    FailureReport report_;
    std::thread thread_;  // last: starts once everything above exists
};

}  // namespace sbx::cli

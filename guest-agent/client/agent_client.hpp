// The host side of the agent protocol (docs/agent-protocol.md): one
// AgentClient is one authenticated connection to sbx-agent, reached
// through the VMM's hybrid-vsock Unix socket ("CONNECT 52\n" → "OK ...\n")
// or over any connected stream (tests). Area-specific calls (exec, files,
// forwarding) build on call() and stream().
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "guest-agent/protocol/frame_stream.hpp"

namespace sbx::agent {

struct AgentEndpoint {
    std::string uds_path;                   // the VMM's --vsock uds=PATH
    std::uint32_t port = kAgentPort;
    std::string token;                      // the per-boot token given to the guest
    std::chrono::milliseconds timeout{10000};  // for connecting and the hello
};

class AgentClient {
public:
    static Result<AgentClient> connect(const AgentEndpoint& endpoint);
    // The hello over an already-connected stream.
    static Result<AgentClient> handshake(UniqueFd fd, std::string_view token,
                                         std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

    [[nodiscard]] FrameStream& stream() { return *stream_; }
    [[nodiscard]] const Json& hello() const { return hello_; }

    // Sends a request ({"type":"request","op":op, ...fields}) and returns
    // the next message; an error message becomes an Error "<code>: <message>".
    [[nodiscard]] Result<Json> call(std::string_view op, Json fields = Json::object());
    // Reads the next message, turning an error message into an Error.
    [[nodiscard]] Result<Json> read_reply();
    [[nodiscard]] Result<void> send_request(std::string_view op, Json fields = Json::object());

    [[nodiscard]] Result<Json> health() { return call("health"); }

private:
    AgentClient(std::unique_ptr<FrameStream> stream, Json hello) : stream_(std::move(stream)), hello_(std::move(hello)) {}
    std::unique_ptr<FrameStream> stream_;
    Json hello_;
};

// The code of an Error made from an error message ("not_found: ..."), or "".
[[nodiscard]] std::string_view error_code(const Error& error);

// Opens a connection through the VMM's hybrid vsock socket to guest port
// `port`, returning the raw stream after the "OK" line.
[[nodiscard]] Result<UniqueFd> connect_hybrid_vsock(const std::string& uds_path, std::uint32_t port,
                                                    std::chrono::milliseconds timeout);

// The host end of the agent's ready announcement: a Unix listener at
// "<uds_path>_53", which must exist before the guest boots.
class ReadyListener {
public:
    static Result<ReadyListener> listen(const std::string& uds_path);
    // Waits for the agent's {"type":"ready",...} message.
    [[nodiscard]] Result<Json> wait(std::chrono::milliseconds timeout);
    [[nodiscard]] const std::string& path() const { return path_; }
    ~ReadyListener();
    ReadyListener(ReadyListener&&) noexcept = default;
    ReadyListener& operator=(ReadyListener&&) noexcept = default;

private:
    ReadyListener(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
    UniqueFd fd_;
    std::string path_;
};

}  // namespace sbx::agent

// The host side of the agent protocol (docs/agent-protocol.md): one
// AgentClient is one authenticated connection to sbx-agent, reached
// through the VMM's hybrid-vsock Unix socket ("CONNECT 52\n" → "OK ...\n")
// or over any connected stream (tests). Area-specific calls (exec, files,
// forwarding) build on call() and read_frame(), never on stream().read():
// every read after the hello is time-limited (docs/agent-protocol.md,
// "Host-side expectations").
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "guest-agent/protocol/frame_stream.hpp"  // before messages.hpp: FrameKind::Json
#include "guest-agent/client/reply_fields.hpp"

namespace sbx::agent {

using Clock = std::chrono::steady_clock;

// Generous: guests in the nested test harness run 10-50x slower than on
// hardware, and a loaded CI host slower still.
inline constexpr std::chrono::milliseconds kDefaultReplyTimeout{120'000};

struct AgentEndpoint {
    std::string uds_path;                   // the VMM's --vsock uds=PATH
    std::uint32_t port = kAgentPort;
    std::string token;                      // the per-boot token given to the guest
    std::chrono::milliseconds timeout{10000};  // for connecting and the hello
    std::chrono::milliseconds reply_timeout = kDefaultReplyTimeout;  // AgentClient::reply_timeout(); 0: none
};

class AgentClient {
public:
    static Result<AgentClient> connect(const AgentEndpoint& endpoint);
    // The hello over an already-connected stream.
    static Result<AgentClient> handshake(UniqueFd fd, std::string_view token,
                                         std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                                         std::chrono::milliseconds reply_timeout = kDefaultReplyTimeout);

    // For writing (any thread) and for handing the socket over; reads go
    // through read_frame() and the calls below, which keep the timeouts.
    [[nodiscard]] FrameStream& stream() { return *stream_; }
    [[nodiscard]] const Json& hello() const { return hello_; }

    // How long a reply may take to begin, and the longest gap inside a
    // frame once it has begun (0: no limit).
    [[nodiscard]] std::chrono::milliseconds reply_timeout() const { return reply_timeout_; }
    void set_reply_timeout(std::chrono::milliseconds timeout);
    // Bounds each write (SO_SNDTIMEO) for uploads; 0, the default, waits
    // without limit (exec stdin must wait for a process that reads late).
    void set_send_timeout(std::chrono::milliseconds timeout);
    // Now plus the reply timeout; nullopt when there is none.
    [[nodiscard]] std::optional<Clock::time_point> reply_deadline() const;

    // Sends a request ({"type":"request","op":op, ...fields}) and returns
    // the next message; an error message becomes an Error "<code>: <message>".
    [[nodiscard]] Result<Json> call(std::string_view op, Json fields = Json::object());
    // Reads the next message, turning an error message into an Error.
    [[nodiscard]] Result<Json> read_reply();
    [[nodiscard]] Result<Json> read_reply(std::optional<Clock::time_point> deadline);
    // The next message, which must be JSON (error messages included).
    [[nodiscard]] Result<Json> read_message(std::optional<Clock::time_point> deadline);
    [[nodiscard]] Result<void> send_request(std::string_view op, Json fields = Json::object());

    // The next frame, waiting for it to begin until `deadline` (nullopt:
    // without limit, for following a stream that may be silent for long);
    // once begun, it must arrive with no gap over the reply timeout. A
    // timeout (is_timeout()), a broken frame or a closed connection
    // abandons the connection.
    [[nodiscard]] Result<Frame> read_frame(std::optional<Clock::time_point> deadline);
    [[nodiscard]] Result<Frame> read_frame() { return read_frame(reply_deadline()); }

    // Ends the connection when the exchange is out of step (a timeout, a
    // download over its cap, a reply breaking the protocol): what the agent
    // sends later would otherwise be read as the next reply. Later calls
    // fail; a thread blocked writing on it gets an error.
    void abandon();
    // `error`, after abandoning the connection.
    [[nodiscard]] Error abandon(Error error);
    [[nodiscard]] bool abandoned() const { return abandoned_; }
    // The message of a JSON frame read with read_frame(): one that does not
    // parse abandons the connection; an error message becomes its Error.
    [[nodiscard]] Result<Json> reply_of(const Frame& frame);
    // `reply` if it is a message of `type` (or an error already); any other
    // message is out of step: the connection is abandoned.
    [[nodiscard]] Result<Json> expect(Result<Json> reply, std::string_view type);

    [[nodiscard]] Result<Json> health() { return call("health"); }

private:
    AgentClient(std::unique_ptr<FrameStream> stream, Json hello, std::chrono::milliseconds reply_timeout)
        : stream_(std::move(stream)), hello_(std::move(hello)), reply_timeout_(reply_timeout) {}
    std::unique_ptr<FrameStream> stream_;
    Json hello_;
    std::chrono::milliseconds reply_timeout_;
    bool abandoned_ = false;
};

// The code of an Error made from an error message ("not_found: ..."), or "".
[[nodiscard]] std::string_view error_code(const Error& error);
// True for the error of a read that timed out (errno ETIMEDOUT).
[[nodiscard]] bool is_timeout(const Error& error);

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

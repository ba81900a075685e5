// A WebSocket connection (RFC 6455) as a route's handler sees it, apart
// from Beast: whole messages in and out through two bounded queues between
// the io_context, which does the frame I/O and never blocks, and the
// handler's own thread, which may. A handler that sends faster than the
// client reads waits in send() (so it stops reading whatever produces its
// output); a client that sends faster than the handler receives is not
// read from until there is room again. Either side going away unblocks
// the other.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "base/result.hpp"

namespace sbx::sbxd::http {

struct WsMessage {
    bool text = false;  // RFC 6455 §5.6: a text message (UTF-8) or a binary one
    std::string data;
};

// RFC 6455 §7.4.1 codes sbxd sends; 4000-4999 are the application's
// (§7.4.2): docs/api.md, "Exec over a WebSocket".
namespace ws_close {
inline constexpr std::uint16_t kNormal = 1000;
inline constexpr std::uint16_t kGoingAway = 1001;
inline constexpr std::uint16_t kUnsupportedData = 1003;
inline constexpr std::uint16_t kInvalidPayload = 1007;
inline constexpr std::uint16_t kPolicyViolation = 1008;
inline constexpr std::uint16_t kTooBig = 1009;
inline constexpr std::uint16_t kInternalError = 1011;
inline constexpr std::uint16_t kTryAgainLater = 1013;
inline constexpr std::uint16_t kApplicationBase = 4000;  // + an HTTP status
}  // namespace ws_close

struct WsClose {
    std::uint16_t code = ws_close::kNormal;
    std::string reason;  // at most 123 bytes (§5.5: a control frame's payload is ≤ 125)
};

class WsChannel {
public:
    using Clock = std::chrono::steady_clock;

    // `wake` runs on the handler's thread and must hand over to the
    // io_context (asio::post): a message or the close is queued, or
    // there is room for incoming messages again.
    WsChannel(std::size_t out_limit, std::size_t in_limit, std::function<void()> wake);

    // --- The handler's side.
    // The next message from the client, waiting until `deadline` (none:
    // without limit). Errors: code "cancelled" once the client closed or
    // left or the handler closed, "timeout" at the deadline.
    [[nodiscard]] Result<WsMessage> receive(std::optional<Clock::time_point> deadline = std::nullopt);
    // Queues a message, waiting while out_limit bytes are queued and
    // unsent (one larger message still goes, alone). "cancelled" once the
    // client is gone or the handler closed.
    [[nodiscard]] Result<void> send(WsMessage message);
    // Ends the connection with this close frame once the queued messages
    // are out; later sends fail and receive() stops. Only the first close
    // counts. A handler that returns without one closes with 1000.
    void close(WsClose close);
    [[nodiscard]] bool gone() const;
    // While the guard lives, `hook` runs once (on the io_context) when the
    // client goes away, to unblock a handler waiting elsewhere; the guard's
    // destructor waits for a running hook.
    class GoneHook {
    public:
        explicit GoneHook(WsChannel* channel) : channel_(channel) {}
        ~GoneHook();
        GoneHook(const GoneHook&) = delete;
        GoneHook& operator=(const GoneHook&) = delete;

    private:
        WsChannel* channel_;
    };
    [[nodiscard]] GoneHook on_gone(std::function<void()> hook);

    // --- The io_context's side.
    // Queues a message from the client; false when the queue is full:
    // read no more until wake runs.
    [[nodiscard]] bool push(WsMessage message);
    [[nodiscard]] bool has_room() const;
    [[nodiscard]] std::optional<WsMessage> take();
    // The close frame to send, once every message was taken.
    [[nodiscard]] std::optional<WsClose> closing() const;
    // The client closed or the connection failed: nothing more is sent.
    void peer_gone();

private:
    std::size_t out_limit_, in_limit_;
    std::function<void()> wake_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<WsMessage> out_, in_;
    std::size_t out_bytes_ = 0, in_bytes_ = 0;
    bool in_paused_ = false;
    bool gone_ = false;
    std::optional<WsClose> close_;
    std::mutex hook_mutex_;
    std::function<void()> hook_;
};

}  // namespace sbx::sbxd::http

// The sbx side of exec over a WebSocket (docs/api.md, "Exec over a
// WebSocket"; RFC 6455): the messages it sends and reads, and one
// connection to sbxd over its Unix socket or TCP with a bearer key, run
// on an asio io_context of its own. A handshake sbxd declines comes back
// as its HTTP reply (the API's JSON error), like any other request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.hpp"
#include "host-tools/sbx/http_client.hpp"
#include "host-tools/sbx/output.hpp"

namespace sbx::cli {

// The first message: exec's JSON body without stdin or detach, with
// tty {rows, cols} when given.
struct TtySize {
    int rows = 24;
    int cols = 80;
};
[[nodiscard]] Json ws_start_message(Json exec_body, std::optional<TtySize> tty);
[[nodiscard]] std::string ws_resize_message(TtySize size);
[[nodiscard]] std::string ws_signal_message(int signal);
[[nodiscard]] std::string ws_eof_message();

// A binary frame from sbxd: 1 stdout or 2 stderr, then the bytes.
struct WsOutput {
    int stream = 1;
    std::string_view bytes;
};
[[nodiscard]] Result<WsOutput> decode_ws_output(std::string_view frame);

// An open exec WebSocket. Callbacks run on run()'s thread; send_* may be
// called from them or, through post(), from any thread.
class WsExecClient {
public:
    struct Handlers {
        std::function<void(bool text, std::string_view data)> message;
        // The connection ended: sbxd's close code (0 when it just broke) and reason.
        std::function<void(std::uint16_t code, std::string reason)> closed;
    };

    // Connects and does the handshake. A declined handshake is an
    // HttpReply in `declined` and no client.
    struct Opened {
        std::unique_ptr<WsExecClient> client;
        std::optional<HttpReply> declined;
    };
    [[nodiscard]] static Result<Opened> open(const HostAddress& address, const std::string& api_key,
                                             const std::string& target);
    ~WsExecClient();
    WsExecClient(const WsExecClient&) = delete;
    WsExecClient& operator=(const WsExecClient&) = delete;

    // Queued in order; `sent` (if any) runs once the message is written.
    void send(bool text, std::string data, std::function<void()> sent = {});
    // Runs `fn` on run()'s thread.
    void post(std::function<void()> fn);
    // Reads until the connection closes; returns then.
    void run(Handlers handlers);
    // Sends a close (1000) once the queue is out.
    void close();
    // Drops the connection at once (run() returns; sbxd kills the command).
    void abort();

    struct Impl;

private:
    explicit WsExecClient(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace sbx::cli

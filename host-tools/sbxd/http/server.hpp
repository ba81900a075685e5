// HTTP/1.1 (RFC 9112) over Unix and TCP sockets with Boost.Beast, on one
// asio io_context: reading, writing, keep-alive and limits happen on that
// thread; every complete request is handed to a worker pool, and its
// response is written back on the io_context (docs/sbxd.md, "Threads").
// Protocol errors get the API's JSON error: 400 bad_request for an
// unparsable request, 413 payload_too_large past the body limit (checked
// against Content-Length before the body is read), 431 headers_too_large.
// Streamed bodies (stream.hpp) run on threads of their own: a response
// whose producer writes it piece by piece, and a request body that a
// route (BodyPolicy) takes as it arrives, with no size limit.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "base/unique_fd.hpp"
#include "base/unix_socket.hpp"
#include "host-tools/sbxd/http/message.hpp"

namespace sbx::sbxd::http {

// `unix:PATH` or `tcp:HOST:PORT` (port 0: any free port).
struct ListenAddress {
    Transport transport = Transport::Unix;
    std::string path;  // unix
    std::string host;  // tcp: a numeric IPv4 or IPv6 address
    std::uint16_t port = 0;
};
[[nodiscard]] Result<ListenAddress> parse_listen_address(std::string_view spec);

struct ServerLimits {
    std::size_t max_body_bytes = 1024 * 1024;
    std::size_t max_header_bytes = 16 * 1024;
    std::chrono::seconds idle_timeout{60};  // keep-alive wait for the next request
    std::chrono::seconds read_timeout{30};  // one request's headers and body
    std::chrono::seconds write_timeout{30};  // each write, a streamed chunk's too
    std::size_t stream_buffer_bytes = 1024 * 1024;  // queued per streamed body, each way
    std::size_t max_streams = 512;  // producers, upload and WebSocket handlers at once; past it 503
    std::size_t ws_max_message_bytes = 1024 * 1024;  // a bigger WebSocket message closes with 1009
    std::chrono::seconds ws_idle_timeout{60};  // a WebSocket peer silent this long (pings at half) is dropped
};

// Runs on a worker thread (a stream thread for a streamed body); may block.
using RequestHandler = std::function<Response(Request)>;
// Given a request's head (no body yet): whether the body is streamed to
// the handler (Request::body_stream) instead of read whole first.
using BodyPolicy = std::function<bool(const Request&)>;

class Server {
public:
    Server(boost::asio::io_context& io, boost::asio::thread_pool& workers, RequestHandler handler,
           ServerLimits limits, BodyPolicy streams_body = {});
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Starts accepting; returns the address as it is bound (the real port
    // for tcp:...:0). Call on the io_context's thread or before it runs.
    [[nodiscard]] Result<std::string> listen(const ListenAddress& address, SocketAccess unix_access = {});
    // Serves one connected stream socket (AF_UNIX: a socketpair's end) as
    // if accepted, its requests going to `handler` instead of the server's
    // own, with Transport::Proxied: sbxd's HTTPS proxy hands over the
    // desktop viewer's connections so (daemon/desktop_viewer.hpp). Any
    // thread may call it.
    void serve(UniqueFd socket, RequestHandler handler);
    // Stops accepting (open connections finish their request); unlinks
    // the Unix sockets it made. The destructor also cancels the streams
    // still running and waits for their threads.
    void close();

    class Listener;

private:
    boost::asio::io_context& io_;
    boost::asio::thread_pool& workers_;
    std::shared_ptr<const RequestHandler> handler_;
    std::shared_ptr<const BodyPolicy> streams_body_;
    ServerLimits limits_;
    StreamThreads threads_;
    std::vector<std::shared_ptr<Listener>> listeners_;
};

}  // namespace sbx::sbxd::http

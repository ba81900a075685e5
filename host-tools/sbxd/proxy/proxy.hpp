// The hosted-ports reverse proxy (docs/sbxd.md, "Hosted ports"): HTTPS
// on `https://<subdomain>-<port>.<domain>`, forwarded as HTTP/1.1 to an
// app inside a sandbox. It knows nothing of the store, sandboxes or the
// agent: sbxd implements Backend, which names a request's target and
// opens the stream to it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/result.hpp"
#include "base/unique_fd.hpp"

namespace sbx::sbxd::proxy {

// What a host name points at.
struct Target {
    std::string sandbox_id;
    std::uint16_t port = 0;
    bool is_public = false;  // false: a request needs `token` (cookie, bearer or _token)
    std::string token;
    bool guest_loopback = false;  // the backend's own: the app listens on the guest's 127.0.0.1
    std::string service{};        // the ProxyConfig::services word it was named by; "" for a port
};

// A connected stream socket (Unix or TCP) to the app, and the bytes
// already read from it (after a vsock CONNECT handshake, say), which the
// proxy takes as the start of the app's first response.
struct Upstream {
    UniqueFd fd;
    std::vector<std::uint8_t> received;
    // Kept as long as the connection to the app: what the backend must
    // hold while it lives (sbxd: the sandbox's activity lease).
    std::shared_ptr<void> hold{};
};

// Called on threads the proxy owns for blocking work, never on the
// io_context's; a call may block for many seconds (resuming a paused
// sandbox, say). Calls for different connections run concurrently.
class Backend {
public:
    virtual ~Backend() = default;
    // `subdomain` is a DNS label ([a-z0-9] and inner '-'), port 1-65535.
    // Code "not_found" → 404; any other error → 503.
    virtual Result<Target> lookup(std::string_view subdomain, std::uint16_t port) = 0;
    // `<subdomain>-<service>.<domain>`, `service` one of
    // ProxyConfig::services; the same codes as lookup.
    virtual Result<Target> lookup_service(std::string_view subdomain, std::string_view service) {
        return Error{fmt::format("nothing is served at {}-{}", subdomain, service), 0, "not_found"};
    }
    // Codes "connect_failed", "agent_unavailable" → 502 (nothing listens
    // yet), "conflict" → 409, "not_found" → 404, any other → 503.
    virtual Result<Upstream> connect(const Target& target) = 0;
    // Traffic seen for target: at most about once a second per connection.
    virtual void activity(const Target& target) = 0;
};

struct ProxyLimits {
    std::size_t max_connections = 4096;        // client connections at once; past it a new one is closed
    std::size_t max_header_bytes = 16 * 1024;  // a request's or response's header; past it 431 (502 upstream)
    std::size_t backend_threads = 8;           // concurrent Backend calls
    // From the accept to the end of the TLS handshake (nginx's
    // ssl_handshake_timeout is 60 s too): a browser's first handshake on a
    // loaded host, with its certificate store to load, can take over 10 s.
    std::chrono::milliseconds handshake_timeout{60'000};
    std::chrono::milliseconds idle_timeout{60'000};        // keep-alive wait for a request's first byte
    // In that wait, the kept upstream link (and with it Upstream::hold, the
    // sandbox's activity lease) is closed after this: an idle browser tab
    // does not hold off the idle pause for the whole keep-alive.
    std::chrono::milliseconds upstream_keep_timeout{5'000};
    std::chrono::milliseconds header_timeout{20'000};      // from that byte to the end of its header
    std::chrono::milliseconds response_timeout{120'000};   // the app's response header; past it 504
    std::chrono::milliseconds body_idle_timeout{300'000};  // a body (either way) without a byte this long
    std::chrono::milliseconds write_timeout{60'000};       // each write to the client or the app
    std::chrono::milliseconds websocket_idle_timeout{600'000};  // a spliced connection silent both ways
};

struct ProxyConfig {
    std::string domain = "sbx.localhost";  // host names are <subdomain>-<port>.<domain>
    // Words that may stand for the port (lower-case labels, not numbers):
    // such names go to Backend::lookup_service.
    std::vector<std::string> services{};
    std::string cert_chain_pem;            // the leaf first, then intermediates (a wildcard *.<domain>, say)
    std::string private_key_pem;
    ProxyLimits limits;
};

class Proxy {
public:
    // Checks the configuration (code "invalid_argument") and the
    // certificate and key (code "bad_certificate"). Call on the
    // io_context's thread or before it runs, as every other member.
    static Result<Proxy> start(boost::asio::io_context& io, ProxyConfig config,
                               std::shared_ptr<Backend> backend);

    Proxy(Proxy&&) noexcept;
    Proxy& operator=(Proxy&&) noexcept;
    ~Proxy();  // close(), then waits for Backend calls in flight

    // Starts accepting on `tcp:HOST:PORT` (HOST a numeric IPv4 address or
    // a bracketed IPv6 one; port 0: any free port); may be called more
    // than once. Returns the bound address, `tcp:127.0.0.1:43117`.
    [[nodiscard]] Result<std::string> listen(std::string_view address);
    // Stops accepting and drops every open connection.
    void close();
    // The first listener's port (0 before listen).
    [[nodiscard]] std::uint16_t port() const;

    struct Shared;

private:
    explicit Proxy(std::shared_ptr<Shared> shared);
    std::shared_ptr<Shared> shared_;
};

}  // namespace sbx::sbxd::proxy

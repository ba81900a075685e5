// The sbx side of HTTP/1.1 (RFC 9112) with Boost.Beast: one synchronous
// request per connection to sbxd, over its Unix socket or TCP with a
// bearer key (docs/api.md). Replies are read whole (JSON) or piecewise
// (exec's NDJSON, SSE output, file downloads), and uploads stream a file
// descriptor as the body, or chunks as they are made (a tar of a tree), so
// neither direction holds a whole file.
//
// Errors: code "unreachable" when no connection could be made,
// "connection_lost" when one broke mid-request, "bad_response" when the
// bytes are not HTTP. An HTTP error status is not an error here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.hpp"

namespace sbx::cli {

inline constexpr std::string_view kDefaultHost = "unix:/run/sandboxer/sbxd.sock";

// Where sbxd answers: SBX_HOST is `unix:PATH` or `http://HOST:PORT`
// (an IPv6 host in brackets; the port defaults to 80).
struct HostAddress {
    enum class Kind { Unix, Tcp };
    Kind kind = Kind::Unix;
    std::string path;  // Unix
    std::string host;  // Tcp
    std::string port;  // Tcp
    [[nodiscard]] std::string to_string() const;
};
[[nodiscard]] Result<HostAddress> parse_host_address(std::string_view spec);

struct HttpRequest {
    std::string method = "GET";
    std::string target;  // origin-form, already encoded: /v1/sandboxes?state=running
    std::string body;    // sent with a Content-Length when the method is not GET/DELETE or it is non-empty
    std::vector<std::pair<std::string, std::string>> headers;
};

struct HttpReply {
    unsigned status = 0;
    std::string content_type;
    std::string request_id;   // X-Request-Id
    std::string retry_after;  // Retry-After
    std::string body;
};

// A reply whose status and headers have been read and whose body is read
// by the caller, piece by piece as it arrives (chunked or not).
class HttpStream {
public:
    HttpStream(HttpStream&&) noexcept;
    HttpStream& operator=(HttpStream&&) noexcept;
    ~HttpStream();

    [[nodiscard]] unsigned status() const;
    [[nodiscard]] std::string header(std::string_view name) const;
    // Up to into.size() bytes of the body as soon as some arrive; 0 at its end.
    [[nodiscard]] Result<std::size_t> read(std::span<char> into);
    // The rest of the body, refusing more than `limit` bytes.
    [[nodiscard]] Result<std::string> read_all(std::size_t limit);
    // read_all as an HttpReply (for an error status seen on a stream).
    [[nodiscard]] Result<HttpReply> to_reply(std::size_t limit);

    struct Impl;  // the connection and Beast's parser (http_client.cpp)
    explicit HttpStream(std::unique_ptr<Impl> impl);

private:
    std::unique_ptr<Impl> impl_;
};

// Called while an upload's body is sent: bytes sent so far.
using UploadProgress = std::function<void(std::uint64_t)>;

// A request whose body is sent as the caller produces it, with chunked
// transfer coding (RFC 9112 §7.1), for a body of unknown length (a tar of
// a directory). Dropped before finish(), it closes the connection without
// the last chunk, which sbxd takes as a failed upload.
class HttpUpload {
public:
    HttpUpload(HttpUpload&&) noexcept;
    HttpUpload& operator=(HttpUpload&&) noexcept;
    ~HttpUpload();

    // One chunk of the body. connection_lost when sbxd went away, maybe
    // after answering early (an error status): reply() reads that answer.
    [[nodiscard]] Result<void> write(std::span<const char> bytes);
    // The last chunk, then the reply's head.
    [[nodiscard]] Result<HttpStream> finish();
    // The reply's head without ending the body: after a failed write.
    [[nodiscard]] Result<HttpStream> reply();

    explicit HttpUpload(std::unique_ptr<HttpStream::Impl> impl);

private:
    std::unique_ptr<HttpStream::Impl> impl_;
};

class HttpClient {
public:
    // api_key is sent as `Authorization: Bearer` on TCP (the Unix
    // socket's file mode is its authentication).
    HttpClient(HostAddress address, std::string api_key);

    [[nodiscard]] const HostAddress& address() const { return address_; }
    [[nodiscard]] bool has_api_key() const { return !api_key_.empty(); }
    [[nodiscard]] const std::string& api_key() const { return api_key_; }

    // The whole reply (bodies up to 64 MiB).
    [[nodiscard]] Result<HttpReply> send(const HttpRequest& request) const;
    // The reply's head; its body is read from the stream.
    [[nodiscard]] Result<HttpStream> open(const HttpRequest& request) const;
    // request.body is ignored: the body is `body_bytes` bytes read from
    // `fd`. A reply that comes before the body is all sent (an error
    // status) is still returned.
    [[nodiscard]] Result<HttpStream> upload(const HttpRequest& request, int fd, std::uint64_t body_bytes,
                                            const UploadProgress& progress) const;
    // request.body is ignored: the request's head is sent, and the body
    // goes through the returned upload, chunk by chunk.
    [[nodiscard]] Result<HttpUpload> upload_chunked(const HttpRequest& request) const;

private:
    HostAddress address_;
    std::string api_key_;
};

}  // namespace sbx::cli

#include "host-tools/sbx/http_client.hpp"

#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>

#include "host-tools/sbx/host_connect.hpp"

namespace sbx::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Socket = asio::generic::stream_protocol::socket;

namespace {

constexpr std::size_t kMaxWholeBody = 64ull << 20;
constexpr std::string_view kUserAgent = "sbx/0.1.0";

Error lost(std::string_view what, const beast::error_code& ec) {
    return make_coded_error("connection_lost", "{} sbxd: {}", what, ec.message());
}

}  // namespace

std::string HostAddress::to_string() const {
    if (kind == Kind::Unix) {
        return "unix:" + path;
    }
    bool v6 = host.find(':') != std::string::npos;
    return "http://" + (v6 ? "[" + host + "]" : host) + ":" + port;
}

Result<HostAddress> parse_host_address(std::string_view spec) {
    HostAddress address;
    if (spec.starts_with("unix:")) {
        address.path = std::string(spec.substr(5));
        if (address.path.empty()) {
            return make_coded_error("usage", "SBX_HOST {}: no socket path after unix:", spec);
        }
        return address;
    }
    if (!spec.starts_with("http://")) {
        return make_coded_error("usage", "SBX_HOST {}: not unix:PATH or http://HOST:PORT", spec);
    }
    std::string_view rest = spec.substr(7);
    if (rest.ends_with('/')) {
        rest.remove_suffix(1);
    }
    address.kind = HostAddress::Kind::Tcp;
    address.port = "80";
    std::string_view port;
    if (rest.starts_with('[')) {
        auto close = rest.find(']');
        if (close == std::string_view::npos) {
            return make_coded_error("usage", "SBX_HOST {}: no ] after an IPv6 address", spec);
        }
        address.host = std::string(rest.substr(1, close - 1));
        std::string_view after = rest.substr(close + 1);
        if (!after.empty() && !after.starts_with(':')) {
            return make_coded_error("usage", "SBX_HOST {}: junk after the host", spec);
        }
        port = after.empty() ? "" : after.substr(1);
    } else {
        auto colon = rest.rfind(':');
        address.host = std::string(rest.substr(0, colon));
        port = colon == std::string_view::npos ? "" : rest.substr(colon + 1);
    }
    if (!port.empty()) {
        address.port = std::string(port);
    }
    bool digits = !address.port.empty() && address.port.size() <= 5 &&
                  address.port.find_first_not_of("0123456789") == std::string::npos;
    if (address.host.empty() || address.host.find('/') != std::string::npos || !digits ||
        std::stoul(address.port) > 65535) {
        return make_coded_error("usage", "SBX_HOST {}: want http://HOST:PORT", spec);
    }
    return address;
}

struct HttpStream::Impl {
    asio::io_context io;
    Socket socket{io};
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
};

HttpStream::HttpStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpStream::HttpStream(HttpStream&&) noexcept = default;
HttpStream& HttpStream::operator=(HttpStream&&) noexcept = default;
HttpStream::~HttpStream() = default;

unsigned HttpStream::status() const {
    return impl_->parser.get().result_int();
}

std::string HttpStream::header(std::string_view name) const {
    const auto& fields = impl_->parser.get();
    auto it = fields.find(beast::string_view(name.data(), name.size()));
    return it == fields.end() ? std::string() : std::string(it->value());
}

Result<std::size_t> HttpStream::read(std::span<char> into) {
    auto& parser = impl_->parser;
    while (!parser.is_done() && !into.empty()) {
        auto& body = parser.get().body();
        body.data = into.data();
        body.size = into.size();
        beast::error_code ec;
        http::read_some(impl_->socket, impl_->buffer, parser, ec);
        if (ec == http::error::need_buffer) {
            ec = {};
        }
        if (ec) {
            return lost("reading the reply of", ec);
        }
        std::size_t got = into.size() - body.size;
        if (got != 0) {
            return got;
        }
    }
    return std::size_t{0};
}

Result<std::string> HttpStream::read_all(std::size_t limit) {
    std::string all;
    std::array<char, 16384> chunk;
    for (;;) {
        auto got = read(chunk);
        if (!got) {
            return got.error();
        }
        if (*got == 0) {
            return all;
        }
        if (all.size() + *got > limit) {
            return make_coded_error("bad_response", "a reply from sbxd over {} bytes", limit);
        }
        all.append(chunk.data(), *got);
    }
}

Result<HttpReply> HttpStream::to_reply(std::size_t limit) {
    HttpReply reply;
    reply.status = status();
    reply.content_type = header("Content-Type");
    reply.request_id = header("X-Request-Id");
    reply.retry_after = header("Retry-After");
    auto body = read_all(limit);
    if (!body) {
        return body.error();
    }
    reply.body = std::move(*body);
    return reply;
}

HttpClient::HttpClient(HostAddress address, std::string api_key)
    : address_(std::move(address)), api_key_(std::move(api_key)) {}

namespace {

Result<std::unique_ptr<HttpStream::Impl>> connect(const HostAddress& address) {
    auto impl = std::make_unique<HttpStream::Impl>();
    impl->parser.body_limit(boost::none);
    if (auto connected = connect_to_host(impl->socket, impl->io, address); !connected) {
        return connected.error();
    }
    return impl;
}

template <typename Message>
void set_fields(Message& message, const HostAddress& address, const std::string& api_key,
                const HttpRequest& request) {
    message.set(http::field::host, address.kind == HostAddress::Kind::Unix ? "sbxd" : address.host);
    message.set(http::field::user_agent, kUserAgent);
    if (address.kind == HostAddress::Kind::Tcp && !api_key.empty()) {
        message.set(http::field::authorization, "Bearer " + api_key);
    }
    for (const auto& [name, value] : request.headers) {
        message.set(name, value);
    }
    message.keep_alive(false);
}

http::verb method_of(const std::string& method) {
    return http::string_to_verb(method);
}

Result<HttpStream> read_head(std::unique_ptr<HttpStream::Impl> impl) {
    beast::error_code ec;
    http::read_header(impl->socket, impl->buffer, impl->parser, ec);
    if (ec) {
        if (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
            ec == asio::error::eof) {
            return lost("no reply from", ec);
        }
        return make_coded_error("bad_response", "reading the reply of sbxd: {}", ec.message());
    }
    return HttpStream(std::move(impl));
}

}  // namespace

Result<HttpStream> HttpClient::open(const HttpRequest& request) const {
    auto impl = connect(address_);
    if (!impl) {
        return impl.error();
    }
    http::request<http::string_body> message{method_of(request.method), request.target, 11};
    set_fields(message, address_, api_key_, request);
    message.body() = request.body;
    if (!request.body.empty() || (request.method != "GET" && request.method != "DELETE")) {
        message.prepare_payload();
    }
    beast::error_code ec;
    http::write((*impl)->socket, message, ec);
    if (ec) {
        return lost("sending a request to", ec);
    }
    return read_head(std::move(*impl));
}

Result<HttpReply> HttpClient::send(const HttpRequest& request) const {
    auto stream = open(request);
    if (!stream) {
        return stream.error();
    }
    return stream->to_reply(kMaxWholeBody);
}

Result<HttpStream> HttpClient::upload(const HttpRequest& request, int fd, std::uint64_t body_bytes,
                                      const UploadProgress& progress) const {
    auto impl = connect(address_);
    if (!impl) {
        return impl.error();
    }
    http::request<http::empty_body> message{method_of(request.method), request.target, 11};
    set_fields(message, address_, api_key_, request);
    message.content_length(body_bytes);
    http::request_serializer<http::empty_body> serializer{message};
    beast::error_code ec;
    http::write_header((*impl)->socket, serializer, ec);
    std::vector<char> chunk(256 * 1024);
    std::uint64_t sent = 0;
    while (!ec && sent < body_bytes) {
        ssize_t n =
            ::read(fd, chunk.data(),
                   static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), body_bytes - sent)));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return sys_error("reading the file to send").with_code("local");
        }
        if (n == 0) {
            return make_coded_error("local", "the file to send shrank to {} of {} bytes", sent, body_bytes);
        }
        asio::write((*impl)->socket, asio::buffer(chunk.data(), static_cast<std::size_t>(n)), ec);
        sent += static_cast<std::uint64_t>(n);
        if (!ec && progress) {
            progress(sent);
        }
    }
    // A write error may be sbxd refusing the body early: its reply, if it
    // sent one, says why.
    auto head = read_head(std::move(*impl));
    if (!head && ec) {
        return lost("sending a file to", ec);
    }
    return head;
}

HttpUpload::HttpUpload(std::unique_ptr<HttpStream::Impl> impl) : impl_(std::move(impl)) {}
HttpUpload::HttpUpload(HttpUpload&&) noexcept = default;
HttpUpload& HttpUpload::operator=(HttpUpload&&) noexcept = default;
HttpUpload::~HttpUpload() = default;

Result<void> HttpUpload::write(std::span<const char> bytes) {
    if (bytes.empty()) {
        return ok();  // an empty chunk would be the last one
    }
    beast::error_code ec;
    asio::write(impl_->socket, http::make_chunk(asio::buffer(bytes.data(), bytes.size())), ec);
    if (ec) {
        return lost("sending a body to", ec);
    }
    return ok();
}

Result<HttpStream> HttpUpload::finish() {
    beast::error_code ec;
    asio::write(impl_->socket, http::make_chunk_last(), ec);
    auto head = read_head(std::move(impl_));
    if (!head && ec) {
        return lost("sending a body to", ec);
    }
    return head;
}

Result<HttpStream> HttpUpload::reply() {
    return read_head(std::move(impl_));
}

Result<HttpUpload> HttpClient::upload_chunked(const HttpRequest& request) const {
    auto impl = connect(address_);
    if (!impl) {
        return impl.error();
    }
    http::request<http::empty_body> message{method_of(request.method), request.target, 11};
    set_fields(message, address_, api_key_, request);
    message.chunked(true);
    http::request_serializer<http::empty_body> serializer{message};
    beast::error_code ec;
    http::write_header((*impl)->socket, serializer, ec);
    if (ec) {
        return lost("sending a request to", ec);
    }
    return HttpUpload(std::move(*impl));
}

}  // namespace sbx::cli

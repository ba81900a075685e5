// One HTTP connection of the Server (server.cpp's only user; a header so
// that server.cpp keeps to the listeners). Requests are read in turn
// (HTTP/1.1 has no multiplexing); each is handled on the worker pool, or
// on a stream thread when its body is streamed, and its response written
// back here, on the io_context. A streamed response is written chunk by
// chunk as its producer queues them, while a read watches for the client
// going away.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "base/log.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/http/server.hpp"
#include "host-tools/sbxd/http/ws_session.hpp"

namespace sbx::sbxd::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

struct SessionContext {
    asio::thread_pool& workers;
    StreamThreads& threads;
    std::shared_ptr<const RequestHandler> handler;
    std::shared_ptr<const BodyPolicy> streams_body;
    ServerLimits limits;
    Transport transport;
};

inline std::string new_request_id() {
    auto hex = random_hex(8);
    return "req_" + (hex ? *hex : std::string("0"));
}

inline bool is_http_error(const beast::error_code& ec) {
    return ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category();
}

template <typename Protocol>
class Session : public std::enable_shared_from_this<Session<Protocol>> {
public:
    using Stream = beast::basic_stream<Protocol, asio::any_io_executor, beast::unlimited_rate_policy>;

    Session(typename Protocol::socket socket, SessionContext context)
        : stream_(std::move(socket)), context_(std::move(context)) {}

    void start() { read_header(); }

private:
    std::shared_ptr<Session> self() { return this->shared_from_this(); }
    // Runs fn on the io_context, from any thread.
    template <typename Fn>
    void on_io(Fn fn) {
        asio::post(stream_.get_executor(), std::move(fn));
    }

    void read_header() {
        parser_.emplace();
        parser_->header_limit(static_cast<std::uint32_t>(context_.limits.max_header_bytes));
        // Beast checks Content-Length against the body limit while reading
        // the header; whether a limit applies is known only after it.
        parser_->body_limit(boost::none);
        stream_.expires_after(buffer_.size() > 0 ? context_.limits.read_timeout : context_.limits.idle_timeout);
        bhttp::async_read_header(stream_, buffer_, *parser_,
                                 [self = self()](beast::error_code ec, std::size_t) { self->on_header(ec); });
    }

    void on_header(beast::error_code ec) {
        if (ec) {
            return fail_read(ec);
        }
        const auto& header = parser_->get();
        version_ = header.version();
        keep_alive_ = header.keep_alive();
        head_ = Request{};
        head_.request_id = new_request_id();
        head_.transport = context_.transport;
        head_.method = std::string(header.method_string());
        auto target = split_target(header.target());
        if (!target) {
            keep_alive_ = false;
            return write(Response::error(target.error(), head_.request_id), head_.request_id);
        }
        head_.path = std::move(target->first);
        head_.query = std::move(target->second);
        for (const auto& field : header) {
            head_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
        }
        if (websocket::is_upgrade(header)) {
            if (auto why = bad_handshake(header); !why.empty()) {
                return reply_and_close(api::code::kBadRequest, why);
            }
            head_.websocket = true;
        }
        const bool streamed = context_.streams_body && (*context_.streams_body)(head_);
        if (auto length = parser_->content_length();
            !streamed && length && *length > context_.limits.max_body_bytes) {
            return reply_and_close(api::code::kPayloadTooLarge,
                                   fmt::format("the body is {} bytes; the limit is {}", *length,
                                               context_.limits.max_body_bytes));
        }
        auto next = [streamed](const std::shared_ptr<Session>& s) {
            streamed ? s->start_upload() : s->read_body();
        };
        if (beast::iequals(header[bhttp::field::expect], "100-continue")) {
            // RFC 9110 §10.1.1: the client waits for this before the body.
            auto interim =
                std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
            stream_.expires_after(context_.limits.write_timeout);
            bhttp::async_write(stream_, *interim,
                               [self = self(), interim, next](beast::error_code wec, std::size_t) {
                                   if (wec) {
                                       return self->close();
                                   }
                                   next(self);
                               });
            return;
        }
        next(self());
    }

    void read_body() {
        parser_->body_limit(context_.limits.max_body_bytes);
        stream_.expires_after(context_.limits.read_timeout);
        bhttp::async_read(stream_, buffer_, *parser_, [self = self()](beast::error_code ec, std::size_t) {
            if (ec) {
                return self->fail_read(ec);
            }
            self->head_.body = std::move(self->parser_->get().body());
            self->dispatch();
        });
    }

    void fail_read(beast::error_code ec) {
        if (ec == bhttp::error::body_limit) {
            return reply_and_close(
                api::code::kPayloadTooLarge,
                fmt::format("the body is over the limit of {} bytes", context_.limits.max_body_bytes));
        }
        if (ec == bhttp::error::header_limit) {
            return reply_and_close(
                api::code::kHeadersTooLarge,
                fmt::format("the headers are over the limit of {} bytes", context_.limits.max_header_bytes));
        }
        if (is_http_error(ec) && ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
            return reply_and_close(api::code::kBadRequest, fmt::format("malformed HTTP request: {}", ec.message()));
        }
        close();  // the peer went away, or a timeout
    }

    void dispatch() {
        stream_.expires_never();
        asio::post(context_.workers, [self = self(), request = std::move(head_)]() mutable {
            std::string id = request.request_id;
            Response response = self->handle(std::move(request));
            self->on_io([self, response = std::move(response), id]() mutable { self->write(std::move(response), id); });
        });
    }

    // On a worker or stream thread. A handler that throws (allocation
    // failure, a bug) costs its request a 500, never the daemon.
    Response handle(Request request) {
        std::string id = request.request_id;
        try {
            return (*context_.handler)(std::move(request));
        } catch (const std::exception& e) {
            log::error("request {}: {}", id, e.what());
            return Response::error(make_coded_error(api::code::kInternal, "internal error: {}", e.what()), id);
        }
    }

    // --- A streamed request body: the handler runs on a stream thread
    // and reads the body while it arrives.
    void start_upload() {
        upload_parser_.emplace(std::move(*parser_));
        upload_parser_->body_limit(boost::none);
        upload_buffer_.resize(64 * 1024);
        reader_ = std::make_shared<BodyReader>(context_.limits.stream_buffer_bytes, [weak = this->weak_from_this()] {
            if (auto s = weak.lock()) {
                s->on_io([s] { s->read_upload(); });
            }
        });
        head_.body_stream = reader_;
        uploading_ = true;
        std::string id = head_.request_id;
        bool started = context_.threads.start(
            context_.limits.max_streams,
            [self = self(), request = std::move(head_), id]() mutable {
                Response response = self->handle(std::move(request));
                self->on_io([self, response = std::move(response), id]() mutable {
                    self->respond_to_upload(std::move(response), id);
                });
            },
            [reader = reader_] { reader->fail("the server is stopping"); });
        if (!started) {
            uploading_ = false;
            return reply_and_close(api::code::kCapacityExceeded, "too many streams are open; retry later");
        }
        read_upload();
    }

    void read_upload() {
        if (!uploading_ || upload_reading_) {
            return;
        }
        if (upload_parser_->is_done()) {
            return reader_->finish();
        }
        auto& body = upload_parser_->get().body();
        body.data = upload_buffer_.data();
        body.size = upload_buffer_.size();
        upload_reading_ = true;
        stream_.expires_after(context_.limits.read_timeout);
        bhttp::async_read_some(stream_, buffer_, *upload_parser_,
                               [self = self()](beast::error_code ec, std::size_t) { self->on_upload(ec); });
    }

    void on_upload(beast::error_code ec) {
        upload_reading_ = false;
        if (ec == bhttp::error::need_buffer) {
            ec = {};
        }
        if (ec == asio::error::operation_aborted && pending_) {
            // respond_to_upload() cancelled the read: the reply goes out.
        } else if (ec) {
            upload_broken_ = true;
            reader_->fail(ec.message());
        } else {
            std::size_t n = upload_buffer_.size() - upload_parser_->get().body().size;
            bool room = n == 0 || reader_->push(std::string(upload_buffer_.data(), n));
            if (upload_parser_->is_done()) {
                reader_->finish();
            } else if (room && !pending_) {
                return read_upload();
            }
        }
        if (pending_) {
            auto [response, id] = std::move(*pending_);
            pending_.reset();
            respond_to_upload(std::move(response), id);
        }
    }

    void respond_to_upload(Response response, std::string id) {
        if (upload_reading_) {
            // Written when that read ends, which it does at once: the rest
            // of the body is not wanted.
            pending_.emplace(std::move(response), std::move(id));
            beast::error_code ignored;
            stream_.socket().cancel(ignored);
            return;
        }
        uploading_ = false;
        if (upload_broken_ || !reader_->complete()) {
            keep_alive_ = false;  // the rest of the body is not read: linger() drops it
        }
        reader_->fail("the response was sent");
        reader_.reset();
        upload_parser_.reset();
        if (upload_broken_) {
            return close();
        }
        write(std::move(response), id);
    }

    void reply_and_close(std::string_view code, std::string message) {
        keep_alive_ = false;
        std::string id = new_request_id();
        write(Response::error(api::ApiError{api::status_for_code(code), std::string(code), std::move(message)}, id),
              id);
    }

    template <typename Message>
    void set_common_fields(Message& reply, const Response& response, const std::string& request_id) {
        reply.set(bhttp::field::server, "sbxd");
        reply.set(bhttp::field::content_type, "application/json");
        reply.set("X-Request-Id", request_id);
        for (const auto& [name, value] : response.headers) {
            reply.set(name, value);
        }
    }

    void write(Response response, const std::string& request_id) {
        if (response.websocket && head_websocket()) {
            return start_websocket(std::move(response), request_id);
        }
        if (response.stream) {
            return write_stream(std::move(response), request_id);
        }
        auto reply = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(response.status),
                                                                           version_ == 0 ? 11 : version_);
        set_common_fields(*reply, response, request_id);
        reply->body() = std::move(response.body);
        reply->keep_alive(keep_alive_);
        reply->prepare_payload();
        stream_.expires_after(context_.limits.write_timeout);
        bhttp::async_write(stream_, *reply, [self = self(), reply](beast::error_code ec, std::size_t) {
            if (ec) {
                return self->close();
            }
            self->next_request();
        });
    }

    [[nodiscard]] bool head_websocket() const {
        return parser_ && websocket::is_upgrade(parser_->get());
    }

    // The connection is a WebSocket from here on (RFC 6455 §4.2.2): this
    // session hands its socket to a WsSession and ends. Bytes the client
    // sent after the handshake before its 101 are not WebSocket frames it
    // may send yet (§4.1), so none are kept.
    void start_websocket(Response response, const std::string& request_id) {
        auto ws = std::make_shared<WsSession<Protocol>>(std::move(stream_), context_.limits);
        closed_ = true;
        ws->start(context_.threads, parser_->release(), std::move(response.websocket), request_id,
                  std::move(response.websocket_protocol));
    }

    void next_request() {
        if (!keep_alive_) {
            return linger();
        }
        read_header();
    }

    // --- A streamed response: its producer runs on a stream thread (started
    // first, so that a server out of threads can still answer with 503),
    // queueing chunks that pump() writes once the header is out.
    void write_stream(Response response, const std::string& request_id) {
        auto head = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(response.status),
                                                                          version_ == 0 ? 11 : version_);
        set_common_fields(*head, response, request_id);
        chunked_ = version_ >= 11;  // RFC 9112 §7.1: not for HTTP/1.0, which reads to the close
        if (chunked_) {
            head->chunked(true);
        } else {
            keep_alive_ = false;
        }
        head->keep_alive(keep_alive_);
        writer_ = std::make_shared<BodyWriter>(context_.limits.stream_buffer_bytes, [weak = this->weak_from_this()] {
            if (auto s = weak.lock()) {
                s->on_io([s] { s->pump(); });
            }
        });
        bool started = context_.threads.start(
            context_.limits.max_streams,
            [writer = writer_, producer = std::move(response.stream), request_id] {
                try {
                    producer(*writer);
                } catch (const std::exception& e) {
                    log::error("request {}: the streamed response failed: {}", request_id, e.what());
                }
                writer->finish();
            },
            [writer = writer_] { writer->cancel(); });
        if (!started) {
            writer_.reset();
            return reply_and_close(api::code::kCapacityExceeded, "too many streams are open; retry later");
        }
        streaming_ = true;
        auto serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*head);
        stream_.expires_after(context_.limits.write_timeout);
        bhttp::async_write_header(stream_, *serializer,
                                  [self = self(), head, serializer](beast::error_code ec, std::size_t) {
                                      if (ec) {
                                          return self->stream_gone();
                                      }
                                      self->header_sent_ = true;
                                      self->watch();
                                      self->pump();
                                  });
    }

    void pump() {
        if (!streaming_ || !header_sent_ || writing_chunk_) {
            return;
        }
        if (writer_->cancelled()) {
            return stream_gone();  // the producer gave up: no last chunk, so the client sees a cut body
        }
        auto done = [self = self()](beast::error_code ec, std::size_t) {
            self->writing_chunk_ = false;
            if (ec) {
                return self->stream_gone();
            }
            self->pump();
        };
        if (auto chunk = writer_->take()) {
            writing_chunk_ = true;
            auto data = std::make_shared<std::string>(std::move(*chunk));
            stream_.expires_after(context_.limits.write_timeout);
            if (chunked_) {
                asio::async_write(stream_, bhttp::make_chunk(asio::buffer(*data)),
                                  [done, data](beast::error_code ec, std::size_t n) { done(ec, n); });
            } else {
                asio::async_write(stream_, asio::buffer(*data),
                                  [done, data](beast::error_code ec, std::size_t n) { done(ec, n); });
            }
            return;
        }
        if (!writer_->finished()) {
            return;  // the producer's next write() wakes us
        }
        if (!chunked_) {
            return end_stream();
        }
        writing_chunk_ = true;
        stream_.expires_after(context_.limits.write_timeout);
        asio::async_write(stream_, bhttp::make_chunk_last(), [self = self()](beast::error_code ec, std::size_t) {
            self->writing_chunk_ = false;
            if (ec) {
                return self->stream_gone();
            }
            self->end_stream();
        });
    }

    // While a response streams, a read on the socket notices the client
    // leaving (EOF, a reset) even when nothing is being written. Bytes it
    // reads (a pipelined request) are kept for after the stream.
    void watch() {
        if (buffer_.size() >= context_.limits.max_header_bytes) {
            return;  // the client is pipelining a lot; a failed write still notices it leave
        }
        watching_ = true;
        stream_.socket().async_read_some(buffer_.prepare(4096),
                                         [self = self()](beast::error_code ec, std::size_t n) {
                                             self->watching_ = false;
                                             if (!ec) {
                                                 self->buffer_.commit(n);
                                             }
                                             if (self->closed_) {
                                                 return;
                                             }
                                             if (self->streaming_) {
                                                 return ec ? self->stream_gone() : self->watch();
                                             }
                                             self->next_request();  // end_stream() cancelled this read
                                         });
    }

    void end_stream() {
        streaming_ = false;
        header_sent_ = false;
        writer_.reset();
        if (watching_) {
            beast::error_code ignored;
            stream_.socket().cancel(ignored);  // the watch's handler goes on
            return;
        }
        next_request();
    }

    void stream_gone() {
        if (writer_) {
            writer_->cancel();  // unblocks the producer
        }
        streaming_ = false;
        close();
    }

    // A close with unread input makes the kernel reset the connection, and
    // a reset can destroy the response before the client reads it (RFC 9112
    // §9.6): so stop sending, read and drop what the client still sends for
    // a moment, then close.
    void linger() {
        beast::error_code ignored;
        stream_.socket().shutdown(Protocol::socket::shutdown_send, ignored);
        stream_.expires_after(std::chrono::seconds(2));
        discard(0);
    }

    void discard(std::size_t total) {
        constexpr std::size_t kMaxDiscard = 4 * 1024 * 1024;
        buffer_.clear();
        stream_.async_read_some(buffer_.prepare(64 * 1024),
                                [self = self(), total](beast::error_code ec, std::size_t n) {
                                    if (ec || total + n > kMaxDiscard) {
                                        return self->close();
                                    }
                                    self->discard(total + n);
                                });
    }

    void close() {
        if (closed_) {
            return;
        }
        closed_ = true;
        beast::error_code ignored;
        stream_.socket().shutdown(Protocol::socket::shutdown_send, ignored);
        stream_.close();
    }

    Stream stream_;
    SessionContext context_;
    beast::flat_buffer buffer_;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
    Request head_;  // the request being read
    unsigned version_ = 11;
    bool keep_alive_ = true;
    bool closed_ = false;

    // A streamed request body.
    std::optional<bhttp::request_parser<bhttp::buffer_body>> upload_parser_;
    std::vector<char> upload_buffer_;
    std::shared_ptr<BodyReader> reader_;
    std::optional<std::pair<Response, std::string>> pending_;  // the reply, waiting for a read to end
    bool uploading_ = false;
    bool upload_reading_ = false;
    bool upload_broken_ = false;

    // A streamed response.
    std::shared_ptr<BodyWriter> writer_;
    bool streaming_ = false;
    bool header_sent_ = false;
    bool writing_chunk_ = false;
    bool watching_ = false;
    bool chunked_ = true;
};

}  // namespace sbx::sbxd::http::detail

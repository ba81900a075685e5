// A message body relayed as it arrives (Beast's buffer_body relay): each
// read takes what the socket has (one read, not a full buffer), and what
// was read is written before the next read, so memory stays at one
// buffer per direction and a server-sent event (text/event-stream) goes
// out the moment it comes in. Chunked bodies are de-chunked by the parser
// and chunked again by the serializer (RFC 9112 §7.1); Content-Length
// bodies pass as they are.
#pragma once

#include <array>
#include <functional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/http.hpp>

#include "host-tools/sbxd/proxy/proxy.hpp"

namespace sbx::sbxd::proxy::detail {

enum class RelayEnd { done, input_failed, output_failed };

class BodyRelay {
public:
    static constexpr std::size_t kChunkBytes = 64 * 1024;

    // on_traffic (may be empty) is called for each piece relayed.
    BodyRelay(const ProxyLimits& limits, std::function<void()> on_traffic)
        : limits_(limits), on_traffic_(std::move(on_traffic)) {}

    // The message's header alone, when it must go out before any of its body.
    template <typename Out, bool isRequest>
    boost::asio::awaitable<bool> write_header(
        Out& out, boost::beast::http::serializer<isRequest, boost::beast::http::buffer_body>& serializer) {
        boost::beast::get_lowest_layer(out).expires_after(limits_.write_timeout);
        auto [ec, n] = co_await boost::beast::http::async_write_header(
            out, serializer, boost::asio::as_tuple(boost::asio::use_awaitable));
        co_return !ec;
    }

    // The rest of the message: the header, if not written yet, then the
    // body that parser (its header read from in) still has to read.
    template <typename In, typename Out, bool isRequest>
    boost::asio::awaitable<RelayEnd> relay(
        In& in, boost::beast::flat_buffer& in_buffer,
        boost::beast::http::parser<isRequest, boost::beast::http::buffer_body>& parser, Out& out,
        boost::beast::http::serializer<isRequest, boost::beast::http::buffer_body>& serializer) {
        namespace bhttp = boost::beast::http;
        constexpr auto tuple = boost::asio::as_tuple(boost::asio::use_awaitable);
        auto& body = parser.get().body();
        if (!serializer.is_header_done() && !co_await write_header(out, serializer)) {
            co_return RelayEnd::output_failed;
        }
        while (!parser.is_done()) {
            body.data = chunk_.data();
            body.size = chunk_.size();
            boost::beast::get_lowest_layer(in).expires_after(limits_.body_idle_timeout);
            auto [ec, n] = co_await bhttp::async_read_some(in, in_buffer, parser, tuple);
            if (ec == bhttp::error::need_buffer) {
                ec = {};
            }
            if (ec) {
                co_return RelayEnd::input_failed;
            }
            body.size = chunk_.size() - body.size;
            body.data = chunk_.data();
            body.more = !parser.is_done();
            if (body.size == 0 && body.more) {
                continue;  // a chunk header, no data yet
            }
            if (on_traffic_) {
                on_traffic_();
            }
            if (!co_await write_some(out, serializer)) {
                co_return RelayEnd::output_failed;
            }
        }
        if (!serializer.is_done()) {
            // The end: nothing more, or the last chunk of a chunked body.
            body.data = nullptr;
            body.size = 0;
            body.more = false;
            if (!co_await write_some(out, serializer)) {
                co_return RelayEnd::output_failed;
            }
        }
        co_return RelayEnd::done;
    }

private:
    template <typename Out, bool isRequest>
    boost::asio::awaitable<bool> write_some(
        Out& out, boost::beast::http::serializer<isRequest, boost::beast::http::buffer_body>& serializer) {
        boost::beast::get_lowest_layer(out).expires_after(limits_.write_timeout);
        auto [ec, n] = co_await boost::beast::http::async_write(
            out, serializer, boost::asio::as_tuple(boost::asio::use_awaitable));
        co_return !ec || ec == boost::beast::http::error::need_buffer;
    }

    const ProxyLimits& limits_;
    std::function<void()> on_traffic_;
    std::array<char, kChunkBytes> chunk_{};
};

}  // namespace sbx::sbxd::proxy::detail

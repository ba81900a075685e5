#include "host-tools/sbx/host_connect.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/error.hpp>

namespace sbx::cli {

namespace asio = boost::asio;

Result<void> connect_to_host(asio::generic::stream_protocol::socket& socket, asio::io_context& io,
                             const HostAddress& address) {
    boost::beast::error_code ec;
    if (address.kind == HostAddress::Kind::Unix) {
        socket.connect(asio::local::stream_protocol::endpoint(address.path), ec);
    } else {
        asio::ip::tcp::resolver resolver(io);
        auto found =
            resolver.resolve(address.host, address.port, asio::ip::tcp::resolver::numeric_service, ec);
        ec = ec ? ec : asio::error::host_not_found;
        for (const auto& entry : found) {
            boost::beast::error_code closed;
            socket.close(closed);
            socket.connect(entry.endpoint(), ec);
            if (!ec) {
                break;
            }
        }
    }
    if (ec) {
        return make_coded_error("unreachable", "cannot reach sbxd at {}: {}", address.to_string(),
                                ec.message());
    }
    return ok();
}

}  // namespace sbx::cli

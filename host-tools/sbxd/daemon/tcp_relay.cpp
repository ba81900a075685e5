#include "host-tools/sbxd/daemon/tcp_relay.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "host-tools/sbxd/api/api_error.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/daemon/ws_exec.hpp"

namespace sbx::sbxd {

namespace {

using http::WsChannel;
using http::WsMessage;

// An error as the framing sends it: with the API's error message first,
// or (plain) as the close alone.
void fail(WsChannel& channel, const Error& error, const std::string& request_id, const TcpFraming& framing) {
    if (framing.eof_messages) {
        return ws_fail(channel, error, request_id);
    }
    channel.close(ws_close_for(error));
}

// The client's messages, into the stream, until its eof, its leaving or
// a bad message.
void relay_from_client(WsChannel& channel, int stream, const std::string& request_id,
                       const TcpFraming& framing) {
    std::string filtered;
    while (true) {
        auto message = channel.receive();
        if (!message) {
            ::shutdown(stream, SHUT_RDWR);  // the client left (or the relay is over)
            return;
        }
        if (!message->text) {
            const std::string* bytes = &message->data;
            if (framing.client_filter) {
                filtered.clear();
                if (auto passed = framing.client_filter(message->data, filtered); !passed) {
                    std::string reason = passed.error().message.substr(0, 123);  // RFC 6455 §5.5
                    channel.close(http::WsClose{http::ws_close::kPolicyViolation, std::move(reason)});
                    ::shutdown(stream, SHUT_RDWR);
                    return;
                }
                bytes = &filtered;
            }
            if (!write_all(stream, bytes->data(), bytes->size())) {
                ::shutdown(stream, SHUT_RDWR);
                return;
            }
            continue;
        }
        auto control = framing.eof_messages
                           ? read_tcp_control(message->data)
                           : Result<void>(make_coded_error(kWsUnsupportedData, "this stream takes binary messages only"));
        if (!control) {
            fail(channel, control.error(), request_id, framing);
            ::shutdown(stream, SHUT_RDWR);
            return;
        }
        ::shutdown(stream, SHUT_WR);
        return;
    }
}

}  // namespace

http::WsMessage tcp_eof_message() { return WsMessage{true, R"({"type":"eof"})"}; }

Result<void> read_tcp_control(std::string_view text) {
    nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    if (value.is_discarded() || !value.is_object()) {
        return make_coded_error(kWsInvalidPayload, "a control message must be a JSON object");
    }
    auto type = value.find("type");
    if (type == value.end() || *type != "eof") {
        return make_coded_error(kWsUnsupportedData, "the only control message is {{\"type\":\"eof\"}}");
    }
    if (value.size() != 1) {
        return api::invalid_argument("an eof message has no other fields");
    }
    return ok();
}

void relay_tcp(WsChannel& channel, UniqueFd stream, std::vector<std::uint8_t> received,
               const std::string& request_id, const TcpFraming& framing) {
    const int fd = stream.get();
    auto hook = channel.on_gone([fd] { ::shutdown(fd, SHUT_RDWR); });
    std::thread input([&] { relay_from_client(channel, fd, request_id, framing); });
    bool sent = received.empty() ||
                channel.send(WsMessage{false, std::string(received.begin(), received.end())}).has_value();
    std::string buffer(kTcpChunkBytes, '\0');
    bool guest_done = false;
    while (sent) {
        ssize_t n = ::read(fd, buffer.data(), buffer.size());
        if (n > 0) {
            sent = channel.send(WsMessage{false, buffer.substr(0, static_cast<std::size_t>(n))}).has_value();
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n == 0) {
            guest_done = framing.eof_messages && channel.send(tcp_eof_message()).has_value();
        } else if (!channel.gone()) {
            fail(channel,
                 Error{fmt::format("the guest connection failed: {}", std::strerror(errno)), 0,
                       std::string(api::code::kAgentUnavailable)},
                 request_id, framing);
        }
        break;
    }
    if (!guest_done) {
        // The client left, or the stream failed: nothing more goes either way.
        channel.close(http::WsClose{http::ws_close::kNormal, ""});
        ::shutdown(fd, SHUT_RDWR);
    }
    input.join();  // after the guest's end, until the client's eof (or its leaving)
    channel.close(http::WsClose{http::ws_close::kNormal, ""});
}

}  // namespace sbx::sbxd

// A WebSocket client for tests of GET /v1/sandboxes/{id}/exec/ws (docs/api.md,
// "Exec over a WebSocket"), with Beast: sends the first message, then the
// actions in order, while it reads everything sbxd sends; the command's
// stdout and stderr go to files, and one JSON line on stdout says how it
// ended: {"exit":{...}|null, "error":{...}|null, "close":{"code","reason"},
// "messages":[the other text messages]}, or {"httpStatus":N,"body":"..."}
// for a declined handshake.
//
// Usage: sbxd_ws_client (--unix PATH | --tcp HOST:PORT) [--token KEY]
//          [--out FILE] [--err FILE] TARGET FIRST [ACTION...]
// FIRST is the first message's text; "binary:TEXT" sends TEXT as a binary
// frame instead. ACTIONs: text:JSON, bytes:TEXT (a binary frame), file:PATH
// (its bytes in 64 KiB binary frames), eof (the eof message), sleep:MS,
// wait:TEXT (until the command's stdout so far holds TEXT).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using nlohmann::json;

namespace {

struct Action {
    enum Kind { Text, Binary, Sleep, Wait } kind = Text;
    std::string data;
    int ms = 0;
};

int usage() {
    std::cerr
        << "usage: sbxd_ws_client (--unix PATH | --tcp HOST:PORT) [--token KEY] [--out FILE] [--err FILE] "
           "TARGET FIRST [text:JSON | bytes:TEXT | file:PATH | eof | sleep:MS | wait:TEXT]...\n";
    return 2;
}

struct Client {
    asio::io_context io;
    websocket::stream<asio::generic::stream_protocol::socket> ws{io};
    asio::steady_timer timer{io};
    std::deque<Action> actions;
    beast::flat_buffer buffer;
    std::ofstream out, err;
    std::string seen;  // the stdout so far, for wait:
    bool waiting = false;
    json result = {{"exit", nullptr}, {"error", nullptr}, {"messages", json::array()}};

    void next_action() {
        if (actions.empty()) {
            return;
        }
        Action& action = actions.front();
        if (action.kind == Action::Wait) {
            waiting = seen.find(action.data) == std::string::npos;
            if (!waiting) {
                actions.pop_front();
                next_action();
            }
            return;
        }
        if (action.kind == Action::Sleep) {
            timer.expires_after(std::chrono::milliseconds(action.ms));
            actions.pop_front();
            timer.async_wait([this](beast::error_code) { next_action(); });
            return;
        }
        ws.text(action.kind == Action::Text);
        ws.async_write(asio::buffer(action.data), [this](beast::error_code ec, std::size_t) {
            actions.pop_front();
            if (!ec) {
                next_action();
            }
        });
    }

    void read() {
        ws.async_read(buffer, [this](beast::error_code ec, std::size_t) {
            if (ec) {
                if (ec == websocket::error::closed) {
                    result["close"] = {{"code", ws.reason().code},
                                       {"reason", std::string(ws.reason().reason.c_str())}};
                } else {
                    result["close"] = {{"code", 0}, {"reason", ec.message()}};
                }
                timer.cancel();
                beast::error_code ignored;
                ws.next_layer().close(ignored);
                return;
            }
            std::string data = beast::buffers_to_string(buffer.data());
            buffer.consume(buffer.size());
            if (!ws.got_text()) {
                if (data.empty() || (data[0] != 1 && data[0] != 2)) {
                    result["badFrame"] = true;
                } else {
                    (data[0] == 1 ? out : err) << data.substr(1);
                    if (data[0] == 1 && seen.size() < (1 << 20)) {
                        seen += data.substr(1);
                    }
                    if (waiting) {
                        next_action();
                    }
                }
            } else {
                json message = json::parse(data, nullptr, false);
                std::string type = message.is_object() ? message.value("type", "") : "";
                if (type == "exit") {
                    result["exit"] = message;
                } else if (type == "error") {
                    result["error"] = message;
                } else {
                    result["messages"].push_back(message.is_discarded() ? json(data) : message);
                }
            }
            read();
        });
    }
};

}  // namespace

int main(int argc, char** argv) {
    std::string unix_path, tcp, token, out_path = "/dev/null", err_path = "/dev/null";
    std::vector<std::string> rest;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (arg == "--unix") {
            unix_path = value();
        } else if (arg == "--tcp") {
            tcp = value();
        } else if (arg == "--token") {
            token = value();
        } else if (arg == "--out") {
            out_path = value();
        } else if (arg == "--err") {
            err_path = value();
        } else {
            rest.push_back(arg);
        }
    }
    if (rest.size() < 2 || unix_path.empty() == tcp.empty()) {
        return usage();
    }
    Client client;
    client.out.open(out_path, std::ios::binary);
    client.err.open(err_path, std::ios::binary);
    beast::error_code ec;
    std::string host = "sbxd";
    if (!unix_path.empty()) {
        client.ws.next_layer().connect(asio::local::stream_protocol::endpoint(unix_path), ec);
    } else {
        auto colon = tcp.rfind(':');
        host = tcp.substr(0, colon);
        asio::ip::tcp::resolver resolver(client.io);
        auto found = resolver.resolve(host, tcp.substr(colon + 1), ec);
        if (!ec && !found.empty()) {
            client.ws.next_layer().connect(found.begin()->endpoint(), ec);
        }
    }
    if (ec) {
        std::cerr << "sbxd_ws_client: connecting: " << ec.message() << "\n";
        return 1;
    }
    client.ws.set_option(websocket::stream_base::decorator([&](websocket::request_type& request) {
        if (!token.empty()) {
            request.set(beast::http::field::authorization, "Bearer " + token);
        }
    }));
    client.ws.read_message_max(0);
    websocket::response_type reply;
    client.ws.handshake(reply, host, rest[0], ec);
    if (ec == websocket::error::upgrade_declined) {
        std::cout << json{{"httpStatus", reply.result_int()}, {"body", reply.body()}}.dump() << "\n";
        return 0;
    }
    if (ec) {
        std::cerr << "sbxd_ws_client: handshake: " << ec.message() << "\n";
        return 1;
    }
    const std::string& first = rest[1];
    if (first.starts_with("binary:")) {
        client.actions.push_back({Action::Binary, first.substr(7)});
    } else {
        client.actions.push_back({Action::Text, first});
    }
    for (std::size_t i = 2; i < rest.size(); ++i) {
        const std::string& a = rest[i];
        if (a.starts_with("text:")) {
            client.actions.push_back({Action::Text, a.substr(5)});
        } else if (a.starts_with("bytes:")) {
            client.actions.push_back({Action::Binary, a.substr(6)});
        } else if (a.starts_with("sleep:")) {
            client.actions.push_back({Action::Sleep, "", std::stoi(a.substr(6))});
        } else if (a.starts_with("wait:")) {
            client.actions.push_back({Action::Wait, a.substr(5)});
        } else if (a == "eof") {
            client.actions.push_back({Action::Text, R"({"type":"eof"})"});
        } else if (a.starts_with("file:")) {
            std::ifstream file(a.substr(5), std::ios::binary);
            if (!file) {
                std::cerr << "sbxd_ws_client: cannot read " << a.substr(5) << "\n";
                return 1;
            }
            std::vector<char> chunk(64 * 1024);
            while (file.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || file.gcount() > 0) {
                client.actions.push_back(
                    {Action::Binary, std::string(chunk.data(), static_cast<std::size_t>(file.gcount()))});
            }
        } else {
            return usage();
        }
    }
    client.read();
    client.next_action();
    client.io.run();
    std::cout << client.result.dump() << "\n";
    return 0;
}

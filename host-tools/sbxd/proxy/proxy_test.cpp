// The proxy end to end (proxy_test_world.hpp): curl over real TLS to an
// in-process Proxy, a real HTTP app behind it (tests/upstream.py); a
// Beast client for the WebSocket and raw TLS for hostile clients.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include "host-tools/sbxd/proxy/proxy_test_world.hpp"

using namespace sbx;
using namespace sbx::sbxd::proxy;
using namespace sbx::sbxd::proxy::testing;
namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

// curl's -w line: "<status> <connects>" after the body.
constexpr const char* kWrite = " -w '\\n%{http_code} %{num_connects}'";

struct Answer {
    int status = 0;
    std::string body;
};
Answer answer_of(const CommandResult& result) {
    auto newline = result.out.rfind('\n');
    Answer answer;
    answer.body = result.out.substr(0, newline == std::string::npos ? 0 : newline);
    if (newline != std::string::npos) {
        answer.status = std::atoi(result.out.c_str() + newline + 1);
    }
    return answer;
}

// A header of a JSON /headers answer, "" when absent.
std::string header_of(const nlohmann::json& seen, std::string_view name) {
    for (const auto& pair : seen["headers"]) {
        if (beast::iequals(pair[0].get<std::string>(), name)) {
            return pair[1].get<std::string>();
        }
    }
    return "";
}

// The visible text of an HTML page: tags removed, blank runs collapsed.
std::string visible_text(std::string_view html) {
    std::string text;
    bool in_tag = false;
    for (char c : html) {
        if (c == '<') {
            in_tag = true;
        } else if (c == '>') {
            in_tag = false;
            text += ' ';
        } else if (!in_tag) {
            text += (c == '\n' ? ' ' : c);
        }
    }
    std::string squeezed;
    for (char c : text) {
        if (!(c == ' ' && (squeezed.empty() || squeezed.back() == ' '))) {
            squeezed += c;
        }
    }
    while (!squeezed.empty() && squeezed.back() == ' ') {
        squeezed.pop_back();
    }
    return squeezed;
}

bool ends_with(std::string_view text, std::string_view end) {
    return text.size() >= end.size() && text.substr(text.size() - end.size()) == end;
}

void check_page(const Answer& answer, int status) {
    CHECK(answer.status == status);
    std::string expected = fmt::format("Sandboxer \xc2\xb7 HTTP {}", status);
    CHECK_MESSAGE(ends_with(visible_text(answer.body), expected), answer.body);
}

// Raw TLS to the proxy: what a hostile client sends.
struct RawTls {
    asio::io_context io;
    asio::ssl::context context{asio::ssl::context::tls_client};
    asio::ssl::stream<tcp::socket> stream{io, context};

    explicit RawTls(std::uint16_t port) {
        context.set_verify_mode(asio::ssl::verify_none);
        stream.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        stream.handshake(asio::ssl::stream_base::client);
    }
    void send(std::string_view text) { asio::write(stream, asio::buffer(text)); }
    // Everything until the proxy closes (or an error).
    std::string read_to_end() {
        std::string all;
        std::array<char, 4096> buffer{};
        boost::system::error_code ec;
        while (!ec) {
            std::size_t n = stream.read_some(asio::buffer(buffer), ec);
            all.append(buffer.data(), n);
        }
        return all;
    }
};

std::size_t peak_rss_kib() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmHWM:", 0) == 0) {
            return std::stoul(line.substr(6));
        }
    }
    return 0;
}

}  // namespace

TEST_CASE("a _token link answers with the cookie and a redirect without it") {
    World world;
    auto result =
        world.curl("-D - -o /dev/null " + shell_quote(world.url("app", "/page?x=1&_token=" + kToken)));
    INFO(result.out);
    CHECK(result.out.find("HTTP/1.1 302") == 0);
    CHECK(result.out.find(fmt::format("Location: https://app-8080.sbx.localhost:{}/page?x=1\r\n",
                                      world.port())) != std::string::npos);
    CHECK(result.out.find("Set-Cookie: __sbx_auth=" + kToken +
                          "; Path=/; HttpOnly; Secure; SameSite=Lax\r\n") != std::string::npos);

    // A browser's path: follow it, keep the cookie; the app never sees the token.
    auto jar = (world.dir / "jar").string();
    auto followed = answer_of(
        world.curl(fmt::format("-L -c {0} -b {0} {1}{2}", shell_quote(jar),
                               shell_quote(world.url("app", "/headers?_token=" + kToken)), kWrite)));
    REQUIRE(followed.status == 200);
    auto seen = nlohmann::json::parse(followed.body);
    CHECK(seen["path"] == "/headers");
    CHECK(header_of(seen, "Cookie").empty());
    auto again = answer_of(world.curl(
        fmt::format("-b {} {}{}", shell_quote(jar), shell_quote(world.url("app", "/headers")), kWrite)));
    CHECK(again.status == 200);

    auto wrong = answer_of(world.curl(shell_quote(world.url("app", "/page?_token=nope")) + kWrite));
    check_page(wrong, 401);
}

TEST_CASE("a private port without the token is 401; bearer, X-Sbx-Auth and the cookie admit") {
    World world;
    check_page(answer_of(world.curl(shell_quote(world.url("app", "/headers")) + kWrite)), 401);
    check_page(answer_of(world.curl("-H 'Authorization: Bearer wrong' " +
                                    shell_quote(world.url("app", "/headers")) + kWrite)),
               401);

    auto bearer = answer_of(world.curl("-H 'Authorization: Bearer " + kToken + "' " +
                                       shell_quote(world.url("app", "/headers")) + kWrite));
    REQUIRE(bearer.status == 200);
    CHECK(header_of(nlohmann::json::parse(bearer.body), "Authorization").empty());

    auto header = answer_of(world.curl("-H 'X-Sbx-Auth: " + kToken + "' -H 'Authorization: Basic YTpi' " +
                                       shell_quote(world.url("app", "/headers")) + kWrite));
    REQUIRE(header.status == 200);
    auto seen = nlohmann::json::parse(header.body);
    CHECK(header_of(seen, "X-Sbx-Auth").empty());
    CHECK(header_of(seen, "Authorization") == "Basic YTpi");  // the app's own credentials pass

    auto cookie = answer_of(world.curl("-H 'Cookie: theme=dark; __sbx_auth=" + kToken + "' " +
                                       shell_quote(world.url("app", "/headers")) + kWrite));
    REQUIRE(cookie.status == 200);
    CHECK(header_of(nlohmann::json::parse(cookie.body), "Cookie") == "theme=dark");
    CHECK(world.backend->activities.load() > 0);
}

TEST_CASE("a service name goes to lookup_service, each with its own token") {
    World world;
    auto url = [&](std::string_view service) {
        return shell_quote(fmt::format("https://app-{}.sbx.localhost:{}/headers", service, world.port()));
    };
    auto bearer = [](const std::string& token) { return "-H 'Authorization: Bearer " + token + "' "; };
    auto desktop = answer_of(world.curl(bearer(kDesktopToken) + url("desktop") + kWrite));
    REQUIRE(desktop.status == 200);
    CHECK(nlohmann::json::parse(desktop.body)["path"] == "/headers");
    CHECK(answer_of(world.curl(bearer(kViewToken) + url("view") + kWrite)).status == 200);
    // One link's token opens no other: view-only never grants control.
    check_page(answer_of(world.curl(bearer(kViewToken) + url("desktop") + kWrite)), 401);
    check_page(answer_of(world.curl(bearer(kDesktopToken) + url("view") + kWrite)), 401);
    check_page(answer_of(world.curl(bearer(kToken) + url("desktop") + kWrite)), 401);
    check_page(answer_of(world.curl(url("view") + kWrite)), 401);
}

TEST_CASE("a public port needs no token; the app sees X-Forwarded-*") {
    World world;
    auto answer = answer_of(world.curl("-H 'X-Forwarded-For: 203.0.113.9' " +
                                       shell_quote(world.url("pub", "/headers?q=1")) + kWrite));
    REQUIRE(answer.status == 200);
    auto seen = nlohmann::json::parse(answer.body);
    CHECK(seen["path"] == "/headers?q=1");
    CHECK(header_of(seen, "X-Forwarded-For") == "203.0.113.9, 127.0.0.1");
    CHECK(header_of(seen, "X-Forwarded-Proto") == "https");
    CHECK(header_of(seen, "X-Forwarded-Host") == fmt::format("pub-8080.sbx.localhost:{}", world.port()));
    CHECK(header_of(seen, "Host") == fmt::format("pub-8080.sbx.localhost:{}", world.port()));
}

TEST_CASE("Sandboxer's own pages: 404, 502, 409, 431, 504, a bad app") {
    World world;
    check_page(answer_of(world.curl(shell_quote(world.url("nope", "/")) + kWrite)), 404);
    check_page(
        answer_of(world.curl(shell_quote(fmt::format("https://other.localhost:{}/", world.port())) + kWrite)),
        404);
    check_page(answer_of(world.curl(shell_quote(world.url("refuse", "/")) + " -H 'X-Sbx-Auth: " + kToken +
                                    "'" + kWrite)),
               502);
    check_page(answer_of(world.curl(shell_quote(world.url("busy", "/")) + " -H 'X-Sbx-Auth: " + kToken + "'" +
                                    kWrite)),
               409);
    check_page(answer_of(world.curl("-H 'X-Big: " + std::string(20000, 'x') + "' " +
                                    shell_quote(world.url("pub", "/headers")) + kWrite)),
               431);
    check_page(answer_of(world.curl(shell_quote(world.url("pub", "/slow")) + kWrite)), 504);
    check_page(answer_of(world.curl(shell_quote(world.url("pub", "/bad")) + kWrite)), 502);
}

TEST_CASE("a body that ends with the app's close reaches the client whole") {
    World world;
    auto answer = answer_of(world.curl(shell_quote(world.url("pub", "/close")) + kWrite));
    CHECK(answer.status == 200);
    CHECK(answer.body == "until the end");
}

TEST_CASE("one upstream connection per client connection while the target stays") {
    World world;
    // Two requests on one curl connection: one Backend connect, one app connection.
    auto both = world.curl(shell_quote(world.url("pub", "/headers")) + " " +
                           shell_quote(world.url("pub", "/headers")));
    auto first = both.out.find("}{");
    REQUIRE_MESSAGE(first != std::string::npos, both.out);
    auto one = nlohmann::json::parse(both.out.substr(0, first + 1));
    auto two = nlohmann::json::parse(both.out.substr(first + 1));
    CHECK(one["connection"] == two["connection"]);
    CHECK(world.backend->connects.load() == 1);

    // Another sandbox on the same client connection: a new upstream.
    auto mixed = world.curl(shell_quote(world.url("pub", "/headers")) + " -H 'X-Sbx-Auth: " + kToken + "' " +
                            shell_quote(world.url("app", "/headers")) + kWrite);
    CHECK(answer_of(mixed).status == 200);
    CHECK(world.backend->connects.load() == 3);
}

TEST_CASE("a kept upstream link and its hold go when no next request comes") {
    auto limits = World::test_limits();
    limits.upstream_keep_timeout = std::chrono::milliseconds(300);
    World world(limits);
    asio::io_context io;
    asio::ssl::context context(asio::ssl::context::tls_client);
    context.load_verify_file((world.dir / "cert.pem").string());
    beast::ssl_stream<beast::tcp_stream> client(io, context);
    REQUIRE(SSL_set_tlsext_host_name(client.native_handle(), "pub-8080.sbx.localhost") == 1);
    beast::get_lowest_layer(client).connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), world.port()));
    client.handshake(asio::ssl::stream_base::client);
    auto get = [&] {
        beast::http::request<beast::http::empty_body> request(beast::http::verb::get, "/headers", 11);
        request.set(beast::http::field::host, fmt::format("pub-8080.sbx.localhost:{}", world.port()));
        beast::http::write(client, request);
        beast::flat_buffer buffer;
        beast::http::response<beast::http::string_body> response;
        beast::http::read(client, buffer, response);
        return response.result_int();
    };
    auto held_becomes = [&](int want) {
        for (int i = 0; i < 500 && world.backend->held.load() != want; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return world.backend->held.load() == want;
    };

    CHECK(get() == 200);
    CHECK(world.backend->held.load() == 1);  // kept for a next request
    CHECK(held_becomes(0));                  // none came: link and hold gone
    // The client's connection stays; its next request connects again.
    CHECK(get() == 200);
    CHECK(world.backend->connects.load() == 2);
    CHECK(world.backend->held.load() == 1);
}

TEST_CASE("server-sent events flow one by one") {
    World world;
    // The app sends one event, then nothing for a minute: only a proxy
    // that relays as it reads lets curl see it before --max-time.
    auto start = std::chrono::steady_clock::now();
    auto result = world.curl("-N --max-time 3 " + shell_quote(world.url("pub", "/sse")));
    auto elapsed = std::chrono::steady_clock::now() - start;
    CHECK(result.out.find("id: 0\ndata: event 0\n\n") == 0);
    CHECK(elapsed < std::chrono::seconds(10));
}

TEST_CASE("a 50 MiB upload streams through with bounded memory") {
    World world;
    constexpr std::size_t kBytes = 50u * 1024 * 1024;
    auto file = world.dir / "big";
    { std::ofstream touch(file); }
    std::filesystem::resize_file(file, kBytes);
    std::size_t before = peak_rss_kib();
    // curl sends Expect: 100-continue for a body this size; the proxy answers it.
    auto sized = answer_of(world.curl("--data-binary @" + shell_quote(file.string()) + " " +
                                      shell_quote(world.url("pub", "/upload")) + kWrite));
    REQUIRE(sized.status == 200);
    CHECK(nlohmann::json::parse(sized.body)["bytes"] == kBytes);
    auto chunked =
        answer_of(world.curl("-H 'Transfer-Encoding: chunked' --data-binary @" + shell_quote(file.string()) +
                             " " + shell_quote(world.url("pub", "/upload")) + kWrite));
    REQUIRE(chunked.status == 200);
    CHECK(nlohmann::json::parse(chunked.body)["bytes"] == kBytes);
    std::size_t after = peak_rss_kib();
#if defined(__SANITIZE_ADDRESS__)
    // ASan's quarantine keeps freed buffers (up to 256 MiB by default), so
    // RSS cannot tell streaming from buffering here; the plain build checks it.
    MESSAGE("peak RSS grew by ", after - before, " KiB (not checked under ASan)");
#else
    CHECK_MESSAGE(after - before < 16 * 1024, "peak RSS grew by ", after - before, " KiB");
#endif
}

TEST_CASE("a WebSocket is spliced through") {
    World world;
    asio::io_context io;
    asio::ssl::context context(asio::ssl::context::tls_client);
    context.load_verify_file((world.dir / "cert.pem").string());
    beast::websocket::stream<beast::ssl_stream<beast::tcp_stream>> ws(io, context);
    std::string host = fmt::format("app-8080.sbx.localhost:{}", world.port());
    REQUIRE(SSL_set_tlsext_host_name(ws.next_layer().native_handle(), "app-8080.sbx.localhost") == 1);
    ws.next_layer().set_verify_mode(asio::ssl::verify_peer);
    ws.next_layer().set_verify_callback(asio::ssl::host_name_verification("app-8080.sbx.localhost"));
    beast::get_lowest_layer(ws).connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), world.port()));
    ws.next_layer().handshake(asio::ssl::stream_base::client);
    ws.set_option(beast::websocket::stream_base::decorator([](beast::websocket::request_type& request) {
        request.set(beast::http::field::authorization, "Bearer " + kToken);
    }));
    ws.handshake(host, "/ws");
    for (std::size_t size : {5u, 300u, 200'000u}) {
        std::string message(size, 'm');
        message[0] = 'a';
        ws.write(asio::buffer(message));
        beast::flat_buffer echoed;
        ws.read(echoed);
        CHECK(beast::buffers_to_string(echoed.data()) == message);
    }
    ws.close(beast::websocket::close_code::normal);

    // Without the token the upgrade is refused with the page.
    beast::websocket::stream<beast::ssl_stream<beast::tcp_stream>> refused(io, context);
    SSL_set_tlsext_host_name(refused.next_layer().native_handle(), "app-8080.sbx.localhost");
    beast::get_lowest_layer(refused).connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), world.port()));
    refused.next_layer().handshake(asio::ssl::stream_base::client);
    beast::websocket::response_type response;
    beast::error_code ec;
    refused.handshake(response, host, "/ws", ec);
    CHECK(ec == beast::websocket::error::upgrade_declined);
    CHECK(response.result_int() == 401);
}

TEST_CASE("hostile clients: garbage gets 400, a slow header is cut off") {
    World world;
    {
        RawTls raw(world.port());
        raw.send("GARBAGE\x01\x02 NOT/HTTP\r\n\r\n");
        auto reply = raw.read_to_end();
        CHECK(reply.find("HTTP/1.1 400 Bad Request") == 0);
        CHECK(
            ends_with(visible_text(reply.substr(reply.find("\r\n\r\n") + 4)), "Sandboxer \xc2\xb7 HTTP 400"));
    }
    {
        RawTls raw(world.port());
        raw.send("GET / HTTP/1.1\r\nHost: pub-8080.sbx.localhost\r\nX-Slow: ");
        auto start = std::chrono::steady_clock::now();
        auto reply = raw.read_to_end();  // header_timeout is 1.5 s here
        CHECK(reply.empty());
        CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    }
    {
        RawTls raw(world.port());
        raw.send("GET / HTTP/1.1\r\n\r\n");  // no Host
        CHECK(raw.read_to_end().find("HTTP/1.1 400") == 0);
    }
    // The proxy still serves.
    CHECK(answer_of(world.curl(shell_quote(world.url("pub", "/headers")) + kWrite)).status == 200);
}

TEST_CASE("start refuses a bad configuration") {
    asio::io_context io;
    auto backend = std::make_shared<FakeBackend>(1, 1);
    ProxyConfig config;
    config.cert_chain_pem = "not a certificate";
    config.private_key_pem = "not a key";
    auto bad_cert = Proxy::start(io, config, backend);
    REQUIRE_FALSE(bad_cert.has_value());
    CHECK(bad_cert.error().code == "bad_certificate");
    config.domain = "bad..domain";
    auto bad_domain = Proxy::start(io, config, backend);
    REQUIRE_FALSE(bad_domain.has_value());
    CHECK(bad_domain.error().code == "invalid_argument");
    config.domain = "sbx.localhost";
    for (const char* word : {"8080", "Desktop", "a.b", ""}) {
        CAPTURE(word);
        config.services = {word};
        auto bad_service = Proxy::start(io, config, backend);
        REQUIRE_FALSE(bad_service.has_value());
        CHECK(bad_service.error().code == "invalid_argument");
    }
}

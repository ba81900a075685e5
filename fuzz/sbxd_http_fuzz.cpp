// libFuzzer target: the bytes a client writes to sbxd's API sockets (the
// first byte picks the Unix socket or TCP on loopback), through the HTTP
// stack sbxd runs (http::Server: Beast's parser, the limits, the router;
// main.cpp's wiring) into ApiService (authentication, scopes, request
// validation, the routes) over a real store with sandboxes in it (for the
// whole run: settings a route changes stay), and a driver that starts no
// VM. The client then reads to the end: what comes back parses as
// HTTP/1.1 responses (RFC 9112 §6), each an error whose JSON carries one
// of the API's stable codes with that code's status (api/api_error.hpp),
// or a routed answer, or (/mcp) a JSON-RPC 2.0 response; no exception reaches the session (it would answer
// 500 "internal error: ..."); the server answers or closes within 20 s,
// however loaded the machine.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <latch>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "base/unix_socket.hpp"
#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/mcp_endpoint.hpp"
#include "host-tools/sbxd/http/server.hpp"
#include "fuzz/fuzz_util.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SBX_FUZZ_LSAN 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define SBX_FUZZ_LSAN 1
#endif
#ifdef SBX_FUZZ_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace {

using namespace sbx;
using namespace sbx::sbxd;
namespace bhttp = boost::beast::http;

using sbx::fuzz::check;

// Every route needs a VM it cannot have: a coded error of the API's.
struct NoVmDriver final : SandboxDriver {
    static Error none() { return make_coded_error(api::code::kInvalidState, "no VMM in the fuzzer"); }
    Result<CreateOutcome> create(const CreateSpec&) override { return none(); }
    Result<SandboxRecord> stop(const std::string&, const api::StopRequest&) override { return none(); }
    Result<ResumeOutcome> resume(const std::string&, const api::ResumeRequest&) override { return none(); }
    Result<std::vector<SandboxRecord>> fork(const std::string&, const api::ForkRequest&,
                                            const std::optional<IdempotencyClaim>&,
                                            const std::vector<std::string>&) override {
        return none();
    }
    Result<void> remove(const std::string&) override { return none(); }
    Result<SnapshotRecord> snapshot(const std::string&, const api::SnapshotRequest&) override { return none(); }
    Result<void> remove_snapshot(const std::string&) override { return none(); }
    Result<AgentAddress> agent(const std::string&) override { return none(); }
    Result<std::string> disk(const std::string&) override { return none(); }
    Result<std::string> console_log(const std::string&) override { return none(); }
};

// OpenSSL keeps per-thread state (a RAND DRBG, an error queue) from a
// thread's first use until it ends, out of LeakSanitizer's sight (behind
// pthread keys): libFuzzer's leak check would report it after the first
// input to reach it. Each of sbxd's threads makes that first use here.
void first_openssl_use() {
#ifdef SBX_FUZZ_LSAN
    __lsan::ScopedDisabler unseen;
#endif
    check(random_hex(8).has_value());
}

// sbxd for the whole run: its state directory, the store with a running
// and a stopped sandbox, and the server on its own io thread.
struct Daemon {
    fuzz::RunDir run{"sbxd"};
    const std::string& dir = run.path();
    std::unique_ptr<Store> store;
    NoVmDriver driver;
    std::unique_ptr<ApiService> service;
    std::unique_ptr<McpEndpoint> mcp;  // /mcp, over the same service
    boost::asio::io_context io;
    static constexpr int kWorkers = 2;
    boost::asio::thread_pool workers{kWorkers};
    std::unique_ptr<http::Server> server;
    std::thread io_thread;
    std::uint16_t tcp_port = 0;

    Daemon() {
        store = std::move(Store::open(dir + "/sbxd.db").value());
        constexpr UnixMillis kAt = 1'700'000'000'000;
        for (const char* id : {"sbx_1", "sbx_2"}) {
            SandboxRecord s;
            s.id = s.name = id;
            s.from = "default";
            s.size = "small";
            s.labels = {{"owner", "fuzz"}};
            s.memory_mib = 512;
            s.created_at = s.last_activity_at = kAt;
            check(store->create_sandbox(s, std::nullopt).has_value());
            check(store->change_state(id, {SandboxState::Running, kAt, std::nullopt}).has_value());
        }
        check(store->change_state("sbx_2", {SandboxState::Stopping, kAt, std::nullopt}).has_value());
        check(store->change_state("sbx_2", {SandboxState::Stopped, kAt, std::nullopt}).has_value());
        api::HostLimits limits;
        limits.host_cpus = 2;
        limits.max_memory_mib = 4096;
        service = std::make_unique<ApiService>(*store, driver, DaemonInfo{"fuzz-host", "fuzz", dir, limits});
        mcp = std::make_unique<McpEndpoint>(*service, mcp::ServerInfo{"sandboxer", "Sandboxer", "fuzz", ""}, McpOptions{});
        service->serve_mcp([this](const http::Request& r, const http::PathParams&) { return mcp->handle(r); });
        server = std::make_unique<http::Server>(
            io, workers, [this](http::Request r) { return service->handle(std::move(r)); }, http::ServerLimits{},
            [this](const http::Request& r) { return service->streams_body(r); });
        check(server->listen({http::Transport::Unix, dir + "/sbxd.sock", "", 0}).has_value());
        auto tcp = server->listen({http::Transport::Tcp, "", "127.0.0.1", 0});
        tcp_port = static_cast<std::uint16_t>(std::stoi(tcp.value().substr(tcp->rfind(':') + 1)));
        io_thread = std::thread([this] { io.run(); });
        auto running = std::make_shared<std::latch>(kWorkers);  // one task on each worker
        auto done = std::make_shared<std::latch>(kWorkers + 1);
        for (int i = 0; i < kWorkers; ++i) {
            boost::asio::post(workers, [running, done] {
                running->arrive_and_wait();
                first_openssl_use();
                done->count_down();
            });
        }
        boost::asio::post(io, [done] {
            first_openssl_use();
            done->count_down();
        });
        done->wait();
    }
    ~Daemon() {
        boost::asio::post(io, [this] {
            server->close();
            io.stop();
        });
        io_thread.join();
        workers.join();
    }

    [[nodiscard]] UniqueFd connect(bool tcp) const {
        if (!tcp) {
            return connect_unix(dir + "/sbxd.sock").value();
        }
        UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(tcp_port);
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        check(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
        return fd;
    }
};

const std::set<std::string, std::less<>> kCodes = {
    std::string(api::code::kBadRequest),       std::string(api::code::kInvalidArgument),
    std::string(api::code::kUnauthorized),     std::string(api::code::kForbidden),
    std::string(api::code::kNotFound),         std::string(api::code::kMethodNotAllowed),
    std::string(api::code::kInvalidState),     std::string(api::code::kIdempotencyConflict),
    std::string(api::code::kAlreadyExists),    std::string(api::code::kPayloadTooLarge),
    std::string(api::code::kHeadersTooLarge),  std::string(api::code::kRateLimited),
    std::string(api::code::kLimitReached),     std::string(api::code::kInternal),
    std::string(api::code::kNotImplemented),   std::string(api::code::kNoReadyMachine),
    std::string(api::code::kAgentUnavailable), std::string(api::code::kCapacityExceeded),
};

void check_response(const bhttp::response<bhttp::string_body>& res) {
    const int status = res.result_int();
    check(status >= 200 && status <= 599);
    check(res.count("X-Request-Id") == 1);
    if (res[bhttp::field::content_type] != "application/json") {
        check(status < 400);  // a routed body of its own type (a file, a log, PEM)
        return;
    }
    const auto body = nlohmann::json::parse(res.body(), nullptr, false);
    if (body.is_object() && body.contains("jsonrpc")) {
        // /mcp: one JSON-RPC 2.0 response (§5), whatever its status.
        check(body["jsonrpc"] == "2.0" && body.contains("id") && (body.contains("result") != body.contains("error")));
        check(!body.contains("error") || (body["error"]["code"].is_number_integer() && body["error"]["message"].is_string()));
        return;
    }
    if (status < 400) {
        // A streamed JSON body may have been cut by the route; a whole one says ok.
        check(body.is_discarded() || res.chunked() || (body.is_object() && body.value("ok", false)));
        return;
    }
    // docs/api.md "Errors": {"ok":false,"status":N,"code":...,"message":...,"requestId":...}
    check(body.is_object() && body.value("ok", true) == false && body.value("status", 0) == status);
    const std::string code = body.value("code", "");
    check(kCodes.contains(code) && api::status_for_code(code) == status);
    check(body.contains("message") && body["message"].is_string() && body.value("requestId", "") == res["X-Request-Id"]);
    // Session::handle answers an escaped exception with this.
    check(!body["message"].get<std::string>().starts_with("internal error:"));
}

// RFC 9112 §6: every response whole, one after the other.
void check_responses(std::string_view out) {
    while (!out.empty()) {
        bhttp::response_parser<bhttp::string_body> parser;
        parser.eager(true);
        parser.body_limit(boost::none);
        boost::beast::error_code ec;
        while (!parser.is_done() && !out.empty()) {
            const std::size_t n = parser.put(boost::asio::buffer(out.data(), out.size()), ec);
            out.remove_prefix(n);
            if (ec == bhttp::error::need_more) {
                ec = {};
            }
            check(!ec);
        }
        if (!parser.is_done()) {
            parser.put_eof(ec);  // a body that runs to the close (HTTP/1.0)
            check(!ec && parser.is_done());
        }
        const auto& res = parser.get();
        if (res.result() == bhttp::status::continue_) {
            continue;  // RFC 9110 §15.2.1: interim
        }
        if (res.result() == bhttp::status::switching_protocols) {
            return;  // a WebSocket from here on
        }
        check_response(res);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static Daemon daemon;
    if (size == 0) {
        return 0;
    }
    const UniqueFd fd = daemon.connect((data[0] & 1) != 0);
    for (std::size_t sent = 1; sent < size;) {
        const ssize_t n = ::send(fd.get(), data + sent, size - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            break;  // the server answered and closed
        }
        sent += static_cast<std::size_t>(n);
    }
    ::shutdown(fd.get(), SHUT_WR);
    std::string out;
    // A hang, not a slow answer: a long run at nice 19 beside harness runs
    // saw units of 13 s, and one replayed in 0.2 s that had passed 20 s.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::array<char, 16 * 1024> buf{};
    while (true) {
        pollfd p{fd.get(), POLLIN, 0};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        check(left.count() > 0);  // answered or closed
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
            continue;
        }
        const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
        if (n <= 0) {
            break;
        }
        out.append(buf.data(), static_cast<std::size_t>(n));
    }
    check_responses(out);
    return 0;
}

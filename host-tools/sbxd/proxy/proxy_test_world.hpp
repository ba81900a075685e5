// The world of proxy_test.cpp: a test certificate (the openssl CLI), the
// app (tests/upstream.py, a real HTTP server), a fake Backend in front of
// it, the Proxy on an io_context thread, and curl as the client.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "host-tools/sbxd/proxy/proxy.hpp"

namespace sbx::sbxd::proxy::testing {

inline const std::string kToken = "tok-123_abc";
// The service names app-desktop (kDesktopToken) and app-view (kViewToken).
inline const std::string kDesktopToken = "desk-456";
inline const std::string kViewToken = "view-789";
inline constexpr std::uint16_t kAppPort = 8080;

inline std::string shell_quote(std::string_view text) {
    std::string out = "'";
    for (char c : text) {
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return out + "'";
}

// Runs a shell command; its exit status and standard output.
struct CommandResult {
    int status = -1;
    std::string out;
};
inline CommandResult run(const std::string& command) {
    CommandResult result;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
        return result;
    }
    char buffer[65536];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) {
        result.out.append(buffer, n);
    }
    int status = ::pclose(pipe);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

inline bool have_program(const char* name) {
    return run(std::string("command -v ") + name + " >/dev/null 2>&1").status == 0;
}

inline std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// A blocking TCP connection to 127.0.0.1:port.
inline Result<UniqueFd> connect_local(std::uint16_t port) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) {
        return sys_error("socket");
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        return sys_error("connecting to 127.0.0.1:{}", port).with_code("connect_failed");
    }
    return fd;
}

// Sandboxes: "app" (private, kToken), "pub" (public), "refuse" (nothing
// listens), "busy" (connect says conflict); anything else is not found.
class FakeBackend : public Backend {
public:
    explicit FakeBackend(std::uint16_t app_port, std::uint16_t closed_port)
        : app_port_(app_port), closed_port_(closed_port) {}

    Result<Target> lookup(std::string_view subdomain, std::uint16_t port) override {
        if (subdomain == "app" || subdomain == "refuse" || subdomain == "busy") {
            return Target{"sbx_" + std::string(subdomain), port, false, kToken};
        }
        if (subdomain == "pub") {
            return Target{"sbx_pub", port, true, ""};
        }
        return make_coded_error("not_found", "no sandbox {}", subdomain);
    }

    Result<Target> lookup_service(std::string_view subdomain, std::string_view service) override {
        if (subdomain != "app") {
            return make_coded_error("not_found", "no sandbox {}", subdomain);
        }
        return Target{"sbx_app", 0, false, service == "view" ? kViewToken : kDesktopToken, false,
                      std::string(service)};
    }

    Result<Upstream> connect(const Target& target) override {
        connects.fetch_add(1);
        if (target.sandbox_id == "sbx_busy") {
            return make_coded_error("conflict", "the sandbox is being stopped");
        }
        auto fd = connect_local(target.sandbox_id == "sbx_refuse" ? closed_port_ : app_port_);
        if (!fd) {
            return fd.error();
        }
        // As sbxd's lease: held while the proxy keeps the link.
        held.fetch_add(1);
        std::shared_ptr<void> hold(nullptr, [this](void*) { held.fetch_sub(1); });
        return Upstream{std::move(*fd), {}, std::move(hold)};
    }

    void activity(const Target&) override { activities.fetch_add(1); }

    std::atomic<int> connects{0};
    std::atomic<int> activities{0};
    std::atomic<int> held{0};  // Upstream::hold not yet released

private:
    std::uint16_t app_port_;
    std::uint16_t closed_port_;
};

// A port nothing listens on: bound, never listened to, kept.
struct ClosedPort {
    UniqueFd fd;
    std::uint16_t port = 0;
    ClosedPort() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t size = sizeof address;
        ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), size);
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &size);
        port = ntohs(address.sin_port);
    }
};

struct World {
    std::filesystem::path dir;
    FILE* app = nullptr;  // upstream.py's stdin: closing it ends the app
    std::uint16_t app_port = 0;
    ClosedPort closed;
    std::shared_ptr<FakeBackend> backend;
    boost::asio::io_context io;
    std::optional<Proxy> proxy;
    std::thread io_thread;

    explicit World(ProxyLimits limits = test_limits()) {
        if (!have_program("curl") || !have_program("openssl") || !have_program("python3") ||
            std::getenv("SBX_PROXY_UPSTREAM") == nullptr) {
            std::fprintf(stderr, "skipped: needs curl, openssl, python3 and SBX_PROXY_UPSTREAM\n");
            std::exit(77);
        }
        std::string templ = (std::filesystem::temp_directory_path() / "sbxd-proxy-XXXXXX").string();
        if (::mkdtemp(templ.data()) == nullptr) {
            throw std::runtime_error("mkdtemp");
        }
        dir = templ;
        make_certificate();
        start_app();
        backend = std::make_shared<FakeBackend>(app_port, closed.port);
        ProxyConfig config;
        config.cert_chain_pem = read_text(dir / "cert.pem");
        config.private_key_pem = read_text(dir / "key.pem");
        config.limits = limits;
        config.services = {"desktop", "view"};
        auto started = Proxy::start(io, config, backend);
        if (!started) {
            throw std::runtime_error(started.error().to_string());
        }
        proxy.emplace(std::move(*started));
        auto bound = proxy->listen("tcp:127.0.0.1:0");
        if (!bound) {
            throw std::runtime_error(bound.error().to_string());
        }
        io_thread = std::thread([this] { io.run(); });
    }

    ~World() {
        boost::asio::post(io, [this] { proxy->close(); });
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        io.stop();
        io_thread.join();
        proxy.reset();
        if (app != nullptr) {
            ::pclose(app);
        }
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }

    static ProxyLimits test_limits() {
        ProxyLimits limits;
        limits.header_timeout = std::chrono::milliseconds(1500);
        limits.response_timeout = std::chrono::milliseconds(2000);
        return limits;
    }

    [[nodiscard]] std::uint16_t port() const { return proxy->port(); }

    // https://<sub>-8080.sbx.localhost:<port><path>
    [[nodiscard]] std::string url(std::string_view sub, std::string_view path) const {
        return fmt::format("https://{}-{}.sbx.localhost:{}{}", sub, kAppPort, port(), path);
    }

    // curl with the test CA, every *.sbx.localhost name on the proxy; its
    // output is -w's status line after the body (curl_status, below).
    [[nodiscard]] CommandResult curl(const std::string& args) const {
        std::string resolve;
        for (const char* sub : {"app", "pub", "refuse", "busy", "nope"}) {
            resolve += fmt::format(" --resolve {}-{}.sbx.localhost:{}:127.0.0.1", sub, kAppPort, port());
        }
        for (const char* service : {"desktop", "view"}) {
            resolve += fmt::format(" --resolve app-{}.sbx.localhost:{}:127.0.0.1", service, port());
        }
        resolve += fmt::format(" --resolve other.localhost:{}:127.0.0.1", port());
        return run(fmt::format("curl -sS --cacert {} {} {} 2>&1", shell_quote((dir / "cert.pem").string()),
                               resolve, args));
    }

private:
    void make_certificate() {
        auto made = run(fmt::format(
            "cd {} && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem "
            "-out cert.pem -days 2 -subj /CN=sbx.localhost "
            "-addext subjectAltName=DNS:*.sbx.localhost,DNS:other.localhost 2>&1",
            shell_quote(dir.string())));
        if (made.status != 0) {
            throw std::runtime_error("openssl req: " + made.out);
        }
    }

    void start_app() {
        auto port_file = dir / "app.port";
        app = ::popen(fmt::format("python3 {} {}", shell_quote(std::getenv("SBX_PROXY_UPSTREAM")),
                                  shell_quote(port_file.string()))
                          .c_str(),
                      "w");
        for (int i = 0; i < 200 && !std::filesystem::exists(port_file); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(25));
        }
        app_port = static_cast<std::uint16_t>(std::stoi(read_text(port_file)));
    }
};

}  // namespace sbx::sbxd::proxy::testing

// For the agent's host-side tests: a real Agent serving connections made
// from socket pairs on their own threads, and clients for them — the
// same code paths as in a guest, minus vsock.
#pragma once

#include <doctest/doctest.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <list>
#include <thread>

#include "guest-agent/agent/agent.hpp"
#include "guest-agent/agent/listener.hpp"
#include "guest-agent/client/agent_client.hpp"
#include "guest-agent/freeze/fake_freeze_kernel.hpp"
#include "guest-agent/identity/fake_identity_kernel.hpp"

namespace sbx::agent::testing {

inline constexpr std::string_view kTestToken = "0123456789abcdef";

// A scratch directory removed at the end of the test.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "sbx-agent-test.XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

struct AgentHarness {
    TempDir dir;
    std::unique_ptr<Agent> agent;
    std::list<std::thread> threads;
    // The identity op's kernel calls: never the real ones in a test.
    std::shared_ptr<FakeIdentityKernel> identity_kernel = std::make_shared<FakeIdentityKernel>();
    // FIFREEZE/FITHAW: never the real ones in a test either.
    std::shared_ptr<FakeFreezeKernel> freeze_kernel = std::make_shared<FakeFreezeKernel>();

    // `host_prefix`: where connect_host(port) goes, "<dir>/host_<port>".
    explicit AgentHarness(std::string token = std::string(kTestToken), DoorLimits limits = {}) {
        AgentOptions options;
        options.token = std::move(token);
        options.limits = limits;
        options.identity_kernel = identity_kernel;
        options.freeze_kernel = freeze_kernel;
        options.env_file = (dir.path / "env").string();
        std::string prefix = (dir.path / "host").string();
        options.connect_host = [prefix](std::uint32_t port) { return connect_unix_host(prefix, port); };
        agent = std::make_unique<Agent>(std::move(options));
    }
    ~AgentHarness() {
        for (auto& t : threads) {
            t.join();  // each ends when its client closes
        }
    }
    [[nodiscard]] std::string host_prefix() const { return (dir.path / "host").string(); }

    // A raw connection whose other end the agent serves.
    UniqueFd connect_raw() {
        int fds[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
        threads.emplace_back([this, fd = UniqueFd(fds[1])]() mutable { agent->serve(std::move(fd)); });
        return UniqueFd(fds[0]);
    }
    AgentClient connect(std::string_view token = kTestToken) {
        auto client = AgentClient::handshake(connect_raw(), token);
        REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().to_string()));
        return std::move(*client);
    }
};

}  // namespace sbx::agent::testing

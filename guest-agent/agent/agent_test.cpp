// Sessions: the hello and its token, request dispatch, and hostile input
// (malformed, truncated, oversized frames, unknown ops), with the agent
// serving other clients throughout; the door's hello deadline and bounds.
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <optional>

#include "guest-agent/agent/agent_test_util.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

// Sends raw bytes on a connection and reads the agent's next message.
Json raw_exchange(UniqueFd& fd, const std::vector<std::uint8_t>& bytes) {
    REQUIRE(::write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    FrameStream stream(UniqueFd(::dup(fd.get())));
    auto reply = stream.read_message();
    REQUIRE(reply.has_value());
    return *reply;
}

std::vector<std::uint8_t> json_frame(std::string_view text) {
    std::vector<std::uint8_t> out;
    encode_json(text, out);
    return out;
}

}  // namespace

TEST_CASE("hello with the token gives the version and boot id") {
    AgentHarness h;
    auto client = h.connect();
    CHECK(client.hello()["version"] == kProtocolVersion);
    CHECK(client.hello()["agent"] == kAgentVersion);
    CHECK(client.hello().contains("boot_id"));
}

TEST_CASE("a wrong or missing token is refused") {
    AgentHarness h;
    auto wrong = AgentClient::handshake(h.connect_raw(), "not-the-token");
    REQUIRE_FALSE(wrong);
    CHECK(error_code(wrong.error()) == "unauthorized");
    auto empty = AgentClient::handshake(h.connect_raw(), "");
    REQUIRE_FALSE(empty);
    CHECK(error_code(empty.error()) == "unauthorized");
}

TEST_CASE("the first message must be a hello") {
    AgentHarness h;
    auto fd = h.connect_raw();
    auto reply = raw_exchange(fd, json_frame(R"({"type":"request","op":"health"})"));
    CHECK(reply["type"] == "error");
    CHECK(reply["code"] == "bad_request");
}

TEST_CASE("health answers with memory, disk and uptime") {
    AgentHarness h;
    auto client = h.connect();
    auto health = client.health();
    REQUIRE(health.has_value());
    CHECK((*health)["type"] == "result");
    CHECK((*health)["memory"]["total"].get<std::uint64_t>() > 0);
    CHECK((*health)["disk"]["total"].get<std::uint64_t>() > 0);
    CHECK((*health)["uptime_s"].get<double>() > 0);
    CHECK((*health)["authenticated"] == true);
}

TEST_CASE("bad requests get an error and the session goes on") {
    AgentHarness h;
    auto client = h.connect();
    auto unknown = client.call("no_such_op");
    REQUIRE_FALSE(unknown);
    CHECK(error_code(unknown.error()) == "unknown_op");

    REQUIRE(client.stream().write_message(Json{{"type", "request"}}));  // no op
    auto no_op = client.read_reply();
    REQUIRE_FALSE(no_op);
    CHECK(error_code(no_op.error()) == "bad_request");

    std::vector<std::uint8_t> not_json = json_frame("{this is not json");
    REQUIRE(::write(client.stream().fd(), not_json.data(), not_json.size()) > 0);
    auto parsed = client.read_reply();
    REQUIRE_FALSE(parsed);
    CHECK(error_code(parsed.error()) == "bad_request");

    CHECK(client.health().has_value());
}

TEST_CASE("a broken frame gets bad_frame and ends only that session") {
    AgentHarness h;
    auto other = h.connect();
    auto client = h.connect();
    SUBCASE("oversized") {
        std::vector<std::uint8_t> huge = {0xff, 0xff, 0xff, 0x7f, 2};
        REQUIRE(::write(client.stream().fd(), huge.data(), huge.size()) == 5);
    }
    SUBCASE("unknown kind") {
        std::vector<std::uint8_t> bad = {2, 0, 0, 0, 42, 0};
        REQUIRE(::write(client.stream().fd(), bad.data(), bad.size()) == 6);
    }
    auto reply = client.read_reply();
    REQUIRE_FALSE(reply);
    CHECK(error_code(reply.error()) == "bad_frame");
    auto closed = client.stream().read();
    REQUIRE_FALSE(closed);
    CHECK(is_closed(closed.error()));
    CHECK(other.health().has_value());
}

TEST_CASE("a truncated frame and a vanished client leave the agent serving") {
    AgentHarness h;
    {
        auto fd = h.connect_raw();
        std::vector<std::uint8_t> part = json_frame(R"({"type":"hello","version":1,"token":"x"})");
        part.resize(part.size() / 2);
        REQUIRE(::write(fd.get(), part.data(), part.size()) > 0);
    }  // closed mid-frame
    {
        auto client = h.connect();
        REQUIRE(client.send_request("health"));
    }  // gone before reading the reply
    auto client = h.connect();
    CHECK(client.health().has_value());
}

TEST_CASE("the token is read from the kernel command line") {
    CHECK(token_from_cmdline("console=ttyS0 sbx.token=abc123 quiet\n") == "abc123");
    CHECK(token_from_cmdline("console=ttyS0 quiet") == "");
}

TEST_CASE("readiness is announced to the host listener") {
    TempDir dir;
    std::string uds = (dir.path / "v.sock").string();
    auto listener = ReadyListener::listen(uds);
    REQUIRE(listener.has_value());
    std::thread agent_side([&] {
        auto fd = connect_unix_host(uds, kReadyPort);
        REQUIRE(fd.has_value());
        FrameStream s(std::move(*fd));
        REQUIRE(s.write_message(Json{{"type", "ready"}, {"boot_id", "b"}}));
    });
    auto ready = listener->wait(std::chrono::milliseconds(5000));
    agent_side.join();
    REQUIRE(ready.has_value());
    CHECK((*ready)["boot_id"] == "b");
}

namespace {

using std::chrono::milliseconds;

// Waits (at most `limit`) for the agent to close `fd`: true on EOF.
bool closed_within(const UniqueFd& fd, milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
        auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            return false;
        }
        pollfd p{fd.get(), POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
            continue;
        }
        char byte = 0;
        ssize_t n = ::read(fd.get(), &byte, 1);
        if (n <= 0) {
            return n == 0 || errno == ECONNRESET;
        }
    }
}

bool pending_drops_to(AgentHarness& h, std::size_t count) {
    for (int i = 0; i < 1000; ++i) {
        if (h.agent->door().pending() <= count) {
            return true;
        }
        std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
}

}  // namespace

TEST_CASE("a connection without a hello is closed at the hello deadline") {
    AgentHarness h(std::string(kTestToken), DoorLimits{.hello_timeout = milliseconds(300)});
    const auto start = std::chrono::steady_clock::now();
    auto fd = h.connect_raw();
    SUBCASE("silent") {}
    SUBCASE("a hello sent a byte at a time, too slowly") {
        std::vector<std::uint8_t> hello = json_frame(R"({"type":"hello","version":1,"token":"0123456789abcdef"})");
        for (std::size_t i = 0; i < 3; ++i) {
            REQUIRE(::write(fd.get(), &hello[i], 1) == 1);
            std::this_thread::sleep_for(milliseconds(50));
        }
    }
    CHECK(closed_within(fd, milliseconds(20000)));
    CHECK(std::chrono::steady_clock::now() - start >= milliseconds(300));
    CHECK(pending_drops_to(h, 0));
    auto client = h.connect();  // one in time is served
    CHECK(client.health().has_value());
}

TEST_CASE("connections before their hello do not keep out an authenticated one") {
    AgentHarness h(std::string(kTestToken), DoorLimits{.max_sessions = 2, .max_pending = 4});
    std::vector<UniqueFd> idle;
    for (std::size_t i = 0; i < 16; ++i) {
        idle.push_back(h.connect_raw());
        for (int wait = 0; wait < 2000 && h.agent->door().arrivals() <= i; ++wait) {
            std::this_thread::sleep_for(milliseconds(5));
        }
        REQUIRE(h.agent->door().arrivals() == i + 1);
        if (i >= 4) {  // each one past max_pending shuts down the oldest
            CHECK(closed_within(idle[i - 4], milliseconds(20000)));
        }
    }
    auto first = h.connect();  // room made by shutting down the oldest idle one
    CHECK(first.health().has_value());
    CHECK(closed_within(idle[12], milliseconds(20000)));
    CHECK(pending_drops_to(h, 3));
    CHECK(h.agent->active_sessions() == 1);

    auto second = h.connect();
    auto third = AgentClient::handshake(h.connect_raw(), kTestToken);
    REQUIRE_FALSE(third);
    CHECK(error_code(third.error()) == "limit");
    CHECK(h.agent->active_sessions() == 2);
    {
        auto gone = std::move(second);
    }  // one session ends: its place is free again
    for (int i = 0; i < 500 && h.agent->active_sessions() > 1; ++i) {
        std::this_thread::sleep_for(milliseconds(10));
    }
    auto again = h.connect();
    CHECK(again.health().has_value());
    CHECK(first.health().has_value());
}

TEST_CASE("the hello deadline is read from the kernel command line") {
    CHECK(hello_timeout_from_cmdline("quiet sbx.hello_timeout=120 sbx.token=ab") == std::chrono::seconds(120));
    CHECK_FALSE(hello_timeout_from_cmdline("quiet sbx.token=ab").has_value());
    CHECK_FALSE(hello_timeout_from_cmdline("sbx.hello_timeout=0").has_value());
    CHECK_FALSE(hello_timeout_from_cmdline("sbx.hello_timeout=5s").has_value());
    CHECK_FALSE(hello_timeout_from_cmdline("sbx.hello_timeout=99999999999").has_value());
}

TEST_CASE("a token kept for the next start: written whole and private, read back only when sane") {
    TempDir dir;
    const std::string file = (dir.path / "run" / "token").string();
    CHECK_FALSE(kept_token(file));
    const std::string first(32, 'a'), second(64, '0');
    REQUIRE(keep_token(file, first));
    CHECK(kept_token(file) == first);
    struct stat st {};
    REQUIRE(::stat(file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    REQUIRE(::stat((dir.path / "run").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    REQUIRE(keep_token(file, second));  // replaced
    CHECK(kept_token(file) == second);
    REQUIRE(keep_token(file, "abcd"));  // too short for the identity op: not taken
    CHECK_FALSE(kept_token(file));
    std::ofstream(file) << "not hex\n";
    CHECK_FALSE(kept_token(file));
}

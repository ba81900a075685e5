// Sessions: the hello and its token, request dispatch, and hostile input
// (malformed, truncated, oversized frames, unknown ops), with the agent
// serving other clients throughout.
#include <doctest/doctest.h>
#include <unistd.h>

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

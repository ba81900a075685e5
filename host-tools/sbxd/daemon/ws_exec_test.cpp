// The messages of exec over a WebSocket (ws_exec.hpp): the first message,
// control messages, output frames and the close code for each error.
#include "host-tools/sbxd/daemon/ws_exec.hpp"

#include <doctest/doctest.h>

using namespace sbx;
using namespace sbx::sbxd;

namespace {

http::WsMessage text(std::string data) {
    return http::WsMessage{true, std::move(data)};
}

std::uint16_t close_code_of(const Error& error) {
    return ws_close_for(error).code;
}

}  // namespace

TEST_CASE("the first message is an exec request in a text frame") {
    auto exec =
        read_ws_start(text(R"({"command":["cat"],"env":{"A":"b"},"cwd":"/tmp","user":"1000","timeoutMs":500,)"
                           R"("tty":{"rows":40,"cols":120}})"));
    REQUIRE_MESSAGE(exec.has_value(), (exec ? "" : exec.error().to_string()));
    CHECK(exec->request.argv == std::vector<std::string>{"cat"});
    CHECK(exec->request.env.at("A") == "b");
    CHECK(exec->request.cwd == "/tmp");
    CHECK(exec->request.user == "1000");
    CHECK(exec->request.timeout == std::chrono::milliseconds(500));
    REQUIRE(exec->request.pty.has_value());
    CHECK(exec->request.pty->rows == 40);
    CHECK(exec->request.pty->cols == 120);
    CHECK(exec->request.stdin_open);
    CHECK_FALSE(exec->detach);

    auto shell = read_ws_start(text(R"({"shell":"echo hi"})"));
    REQUIRE(shell.has_value());
    CHECK(shell->request.shell == "echo hi");
    CHECK_FALSE(shell->request.pty.has_value());
    CHECK(shell->command.dump() == R"(["/bin/sh","-c","echo hi"])");

    auto defaults = read_ws_start(text(R"({"shell":"tty","tty":{}})"));
    REQUIRE(defaults.has_value());
    CHECK(defaults->request.pty->rows == 24);
    CHECK(defaults->request.pty->cols == 80);
}

TEST_CASE("a bad first message names its close code") {
    auto binary = read_ws_start(http::WsMessage{false, R"({"shell":"true"})"});
    REQUIRE_FALSE(binary.has_value());
    CHECK(close_code_of(binary.error()) == 1003);

    for (const char* bad : {"{", "not json", "[1,2]", "\"a string\""}) {
        auto r = read_ws_start(text(bad));
        REQUIRE_FALSE(r.has_value());
        CHECK_MESSAGE(close_code_of(r.error()) == 1007, bad);
    }
    for (const char* bad :
         {R"({"shell":"true","stdin":"aGk="})", R"({"shell":"true","detach":true})",
          R"({"shell":"true","bogus":1})", R"({"command":[]})", R"({})", R"({"shell":"x","command":["y"]})",
          R"({"shell":"x","tty":{"rows":0,"cols":80}})", R"({"shell":"x","tty":{"rows":24,"cols":70000}})",
          R"({"shell":"x","tty":5})", R"({"shell":"x","tty":{"rows":24,"lines":2}})",
          R"({"shell":"x","timeoutMs":-1})"}) {
        auto r = read_ws_start(text(bad));
        REQUIRE_FALSE(r.has_value());
        CHECK_MESSAGE(r.error().code == "invalid_argument", bad);
        CHECK_MESSAGE(close_code_of(r.error()) == 4400, bad);
    }
}

TEST_CASE("control messages: resize, signal, eof") {
    auto resize = read_ws_control(R"({"type":"resize","rows":50,"cols":132})");
    REQUIRE(resize.has_value());
    CHECK(resize->kind == WsControl::Resize);
    CHECK(resize->rows == 50);
    CHECK(resize->cols == 132);

    auto term = read_ws_control(R"({"type":"signal","signal":"TERM"})");
    REQUIRE(term.has_value());
    CHECK(term->kind == WsControl::Signal);
    CHECK(term->signal == 15);
    CHECK(read_ws_control(R"({"type":"signal","signal":"SIGKILL"})")->signal == 9);
    CHECK(read_ws_control(R"({"type":"signal","signal":2})")->signal == 2);

    auto eof = read_ws_control(R"({"type":"eof"})");
    REQUIRE(eof.has_value());
    CHECK(eof->kind == WsControl::Eof);

    CHECK(close_code_of(read_ws_control("nope").error()) == 1007);
    CHECK(close_code_of(read_ws_control(R"({"type":"dance"})").error()) == 1003);
    CHECK(close_code_of(read_ws_control(R"({"rows":1})").error()) == 1003);
    for (const char* bad :
         {R"({"type":"resize","rows":0,"cols":80})", R"({"type":"resize","rows":24})",
          R"({"type":"resize","rows":24,"cols":80,"x":1})", R"({"type":"signal","signal":"NOPE"})",
          R"({"type":"signal","signal":65})", R"({"type":"signal"})", R"({"type":"eof","now":true})"}) {
        auto r = read_ws_control(bad);
        REQUIRE_FALSE(r.has_value());
        CHECK_MESSAGE(close_code_of(r.error()) == 4400, bad);
    }
}

TEST_CASE("output frames carry the stream's byte first") {
    const std::uint8_t bytes[] = {0, 'a', 0xff};
    auto out = ws_output(kWsStderr, bytes);
    CHECK_FALSE(out.text);
    REQUIRE(out.data.size() == 4);
    CHECK(out.data[0] == 2);
    CHECK(out.data[1] == 0);
    CHECK(out.data[2] == 'a');
    CHECK(static_cast<std::uint8_t>(out.data[3]) == 0xff);
    CHECK(ws_output(kWsStdout, {}).data == std::string(1, '\1'));
}

TEST_CASE("API errors close with 4000 + status, 1013 when retryable, 1011 when internal") {
    auto code = [](std::string_view c) { return close_code_of(Error{"x", 0, std::string(c)}); };
    CHECK(code("not_found") == 4404);
    CHECK(code("invalid_state") == 4409);
    CHECK(code("forbidden") == 4403);
    CHECK(code("agent_unavailable") == 4502);
    CHECK(code("rate_limited") == 1013);
    CHECK(code("limit_reached") == 1013);
    CHECK(code("capacity_exceeded") == 1013);
    CHECK(code("internal") == 1011);
    CHECK(code("") == 1011);
    auto close = ws_close_for(Error{"no sandbox sbx_1", 0, "not_found"});
    CHECK(close.reason == "not_found");

    auto frame = ws_error(Error{"no sandbox sbx_1", 0, "not_found"}, "req_1");
    CHECK(frame.text);
    auto body = nlohmann::json::parse(frame.data);
    CHECK(body["type"] == "error");
    CHECK(body["ok"] == false);
    CHECK(body["status"] == 404);
    CHECK(body["code"] == "not_found");
    CHECK(body["requestId"] == "req_1");
    auto framing =
        nlohmann::json::parse(ws_error(Error{"not JSON", 0, std::string(kWsInvalidPayload)}, "r").data);
    CHECK(framing["status"] == 400);
    CHECK(framing["code"] == "bad_request");
}

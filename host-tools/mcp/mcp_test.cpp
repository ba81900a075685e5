// The MCP protocol and tools against a scripted API (what sbxd would
// answer): the JSON-RPC rules of both revisions, the tools' requests and
// results. The real thing end to end: host-tools/sbx/tests/mcp_test.sh
// (the official MCP SDK's client over `sbx mcp`).
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <deque>

#include "base/base64.hpp"
#include "host-tools/mcp/http_rules.hpp"
#include "host-tools/mcp/protocol.hpp"
#include "host-tools/mcp/schema_check.hpp"

using namespace sbx;
using namespace sbx::mcp;

namespace {

struct FakeApi final : ApiCaller {
    struct Answer {
        int status = 200;
        std::string body;
        std::string type = "application/json";
    };
    std::vector<ApiCall> calls;
    std::deque<Answer> answers;
    std::size_t taken = 0;  // bytes the last sink accepted

    Result<ApiHead> call(const ApiCall& c, const BodySink& sink) override {
        calls.push_back(c);
        REQUIRE(!answers.empty());
        Answer a = answers.front();
        answers.pop_front();
        taken = 0;
        for (std::size_t i = 0; i < a.body.size(); i += 7) {  // in odd pieces, as a socket would
            const auto piece = std::string_view(a.body).substr(i, 7);
            if (!sink(piece)) {
                break;
            }
            taken += piece.size();
        }
        return ApiHead{a.status, a.type};
    }
    void answer(int status, std::string body, std::string type = "application/json") {
        answers.push_back({status, std::move(body), std::move(type)});
    }
};

struct Bed {
    Protocol protocol{sandbox_tools(), ServerInfo{"sandboxer", "Sandboxer", "9.9", "Use the tools."}, ToolDefaults{}};
    Session session;
    FakeApi api;

    Json request(const std::string& method, Json params = Json::object(), Json id = 1) {
        auto reply = protocol.handle(Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}},
                                     session, api);
        REQUIRE(reply.has_value());
        return *reply;
    }
    Json call(const std::string& tool, Json arguments) {
        Json reply = request("tools/call", {{"name", tool}, {"arguments", arguments}});
        REQUIRE(reply.contains("result"));
        return reply["result"];
    }
    // A tool error's {"code","message"}.
    static Json error_of(const Json& result) {
        REQUIRE(result.value("isError", false));
        return Json::parse(result["content"][0]["text"].get<std::string>())["error"];
    }
};

Json modern_meta(std::string version = "2026-07-28") {
    return {{"_meta",
             {{"io.modelcontextprotocol/protocolVersion", version},
              {"io.modelcontextprotocol/clientCapabilities", Json::object()}}}};
}

}  // namespace

TEST_CASE("initialize agrees on a version and names the server") {
    Bed bed;
    Json r = bed.request("initialize", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()},
                                        {"clientInfo", {{"name", "t"}, {"version", "1"}}}});
    CHECK(r["result"]["protocolVersion"] == "2025-06-18");
    CHECK(r["result"]["capabilities"]["tools"].is_object());
    CHECK(r["result"]["serverInfo"]["name"] == "sandboxer");
    CHECK(r["result"]["serverInfo"]["version"] == "9.9");
    CHECK(r["result"]["instructions"] == "Use the tools.");
    CHECK(bed.session.protocol_version == "2025-06-18");
    // An unknown version gets our newest (basic/lifecycle: not an error).
    CHECK(bed.request("initialize", {{"protocolVersion", "1999-01-01"}})["result"]["protocolVersion"] == "2025-11-25");
    CHECK(bed.request("initialize", Json::object())["result"]["protocolVersion"] == "2025-11-25");
    CHECK(!bed.protocol.handle(Json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}, bed.session, bed.api));
    CHECK(bed.session.initialized);
}

TEST_CASE("JSON-RPC's rules") {
    Bed bed;
    CHECK(bed.request("ping")["result"] == Json::object());
    CHECK(bed.request("ping", Json::object(), "abc")["id"] == "abc");
    CHECK(bed.request("resources/list")["error"]["code"] == rpc::kMethodNotFound);
    CHECK(bed.protocol.handle_text("{nope", bed.session, bed.api).value()["error"]["code"] == rpc::kParseError);
    CHECK(bed.protocol.handle(Json::array({1}), bed.session, bed.api).value()["error"]["code"] == rpc::kInvalidRequest);
    auto null_id = bed.protocol.handle(Json{{"jsonrpc", "2.0"}, {"id", nullptr}, {"method", "ping"}}, bed.session, bed.api);
    CHECK(null_id.value()["error"]["code"] == rpc::kInvalidRequest);
    auto bad_params = bed.protocol.handle(Json{{"jsonrpc", "2.0"}, {"id", 3}, {"method", "ping"}, {"params", 5}},
                                          bed.session, bed.api);
    CHECK(bad_params.value()["error"]["code"] == rpc::kInvalidParams);
    // A response from the client, and a notification, get no reply.
    CHECK(!bed.protocol.handle(Json{{"jsonrpc", "2.0"}, {"id", 9}, {"result", Json::object()}}, bed.session, bed.api));
    CHECK(!bed.protocol.handle(Json{{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}}, bed.session, bed.api));
    CHECK(bed.request("tools/list", {{"cursor", "x"}})["error"]["code"] == rpc::kInvalidParams);
}

TEST_CASE("every tool is well described and its schemas stay in the checked subset") {
    Bed bed;
    const Json tools = bed.request("tools/list")["result"]["tools"];
    CHECK(tools.size() == bed.protocol.tools().size());
    // [A-Za-z0-9_.-]{1,64}: 2025-11-25 server/tools "Tool names", as the conformance suite checks.
    const auto good_name = [](const std::string& n) {
        return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
                   return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
               });
    };
    for (const auto& tool : tools) {
        CAPTURE(tool["name"]);
        CHECK(good_name(tool["name"].get<std::string>()));
        CHECK(!tool["description"].get<std::string>().empty());
        CHECK(tool["inputSchema"]["type"] == "object");
        CHECK(tool["outputSchema"]["type"] == "object");
        CHECK(unknown_keywords(tool["inputSchema"]).empty());
        CHECK(unknown_keywords(tool["outputSchema"]).empty());
        CHECK(tool["annotations"].contains("readOnlyHint"));
        CHECK(tool["annotations"]["openWorldHint"] == false);
    }
    for (const char* wanted : {"sandbox_create", "sandbox_list", "sandbox_get", "sandbox_delete", "sandbox_stop",
                               "sandbox_resume", "sandbox_fork", "exec", "exec_start", "exec_status", "exec_output",
                               "exec_signal", "write_stdin", "read_file", "write_file", "list_files", "host_port", "unhost_port",
                               "snapshot_create", "snapshot_list", "snapshot_delete", "handoff_session", "desktop_start",
                               "desktop_status", "desktop_action"}) {
        CAPTURE(wanted);
        CHECK(std::any_of(tools.begin(), tools.end(), [&](const Json& t) { return t["name"] == wanted; }));
    }
}

TEST_CASE("tools/call: unknown tools, bad arguments, API errors") {
    Bed bed;
    CHECK(bed.request("tools/call", {{"name", "nope"}})["error"]["code"] == rpc::kInvalidParams);
    // Input validation is a tool error (server/tools "Error Handling").
    CHECK(Bed::error_of(bed.call("sandbox_get", {{"sandbox", "sbx_1"}, {"colour", "red"}}))["code"] == "invalid_argument");
    CHECK(Bed::error_of(bed.call("sandbox_get", Json::object()))["message"] == "arguments: sandbox is required");
    CHECK(Bed::error_of(bed.call("exec", {{"sandbox", "s"}, {"command", Json::array({1})}}))["message"] ==
          "command[0]: must be string");
    CHECK(Bed::error_of(bed.call("exec", {{"sandbox", "s"}}))["code"] == "invalid_argument");  // neither command nor shell
    CHECK(bed.api.calls.empty());
    bed.api.answer(404, R"({"ok":false,"status":404,"code":"not_found","message":"no sandbox sbx_1"})");
    const Json e = Bed::error_of(bed.call("sandbox_get", {{"sandbox", "sbx_1"}}));
    CHECK(e["code"] == "not_found");
    CHECK(e["message"] == "no sandbox sbx_1");
    CHECK(bed.api.calls.at(0).target == "/v1/sandboxes/sbx_1");
}

TEST_CASE("sandbox_create takes the server's defaults and passes an idempotency key") {
    ToolDefaults defaults;
    defaults.size = "small";
    defaults.ttl = "30m";
    defaults.labels = {{"via", "mcp"}};
    Protocol protocol(sandbox_tools(), ServerInfo{}, defaults);
    Session session;
    FakeApi api;
    api.answer(201, R"({"ok":true,"sandbox":{"id":"sbx_9","state":"running"},"replayed":false,"warnings":[]})");
    auto reply = protocol.handle(Json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/call"},
                                      {"params", {{"name", "sandbox_create"},
                                                  {"arguments", {{"labels", {{"task", "t1"}}}, {"idempotencyKey", "k1"}}}}}},
                                 session, api);
    const Json r = reply.value()["result"];
    CHECK(r["structuredContent"]["sandbox"]["id"] == "sbx_9");
    CHECK(Json::parse(r["content"][0]["text"].get<std::string>()) == r["structuredContent"]);
    const Json body = Json::parse(api.calls.at(0).body);
    CHECK(body == Json{{"size", "small"}, {"ttl", "30m"}, {"labels", {{"via", "mcp"}, {"task", "t1"}}}});
    CHECK(api.calls[0].headers.at(1) == std::pair<std::string, std::string>{"Idempotency-Key", "k1"});
}

TEST_CASE("sandbox_list encodes its selectors") {
    Bed bed;
    bed.api.answer(200, R"({"ok":true,"sandboxes":[]})");
    CHECK(bed.call("sandbox_list", {{"labels", {{"a", "b c"}}}, {"state", {"running", "paused"}}})["structuredContent"] ==
          Json{{"sandboxes", Json::array()}});
    CHECK(bed.api.calls.at(0).target == "/v1/sandboxes?labels=a%3Db%20c&state=running%2Cpaused");
}

TEST_CASE("exec: one request, the output kept whole or cut in the middle") {
    Bed bed;
    bed.api.answer(200,
                   "{\"type\":\"start\",\"pid\":5}\n{\"type\":\"stdout\",\"data\":\"" + base64_encode("hi\n") +
                       "\"}\n{\"type\":\"stderr\",\"data\":\"" + base64_encode("\xff oops\n") +
                       "\"}\n{\"type\":\"exit\",\"exitCode\":3}\n",
                   "application/x-ndjson");
    Json r = bed.call("exec", {{"sandbox", "sbx_1"}, {"shell", "echo hi"}, {"stdin", "x"}})["structuredContent"];
    CHECK(r["exitCode"] == 3);
    CHECK(r["stdout"] == "hi\n");
    CHECK(r["stderr"] == "\xEF\xBF\xBD oops\n");  // not UTF-8: replaced
    CHECK(r["truncated"] == false);
    const ApiCall& c = bed.api.calls.at(0);
    CHECK(c.target == "/v1/sandboxes/sbx_1/exec");
    CHECK(Json::parse(c.body) == Json{{"shell", "echo hi"}, {"timeoutMs", 60000}, {"stdin", base64_encode("x")}});

    const std::string big(5000, 'a');
    bed.api.answer(200, "{\"type\":\"stdout\",\"data\":\"" + base64_encode(big + "END") +
                            "\"}\n{\"type\":\"exit\",\"exitCode\":null,\"signal\":9,\"timedOut\":true}\n");
    r = bed.call("exec", {{"sandbox", "sbx_1"}, {"command", {"yes"}}, {"maxOutputBytes", 1024}})["structuredContent"];
    CHECK(r["truncated"] == true);
    CHECK(r["stdoutBytes"] == 5003);
    CHECK(r["timedOut"] == true);
    CHECK(r["signal"] == 9);
    const std::string out = r["stdout"];
    CHECK(out.starts_with(std::string(512, 'a') + "\n[… 3979 bytes left out …]\n"));
    CHECK(out.ends_with("aEND"));

    bed.api.answer(200, "{\"type\":\"start\",\"pid\":5}\n{\"type\":\"error\",\"code\":\"agent_unavailable\",\"message\":\"gone\"}\n");
    CHECK(Bed::error_of(bed.call("exec", {{"sandbox", "sbx_1"}, {"shell", "x"}}))["code"] == "agent_unavailable");
    bed.api.answer(200, "{\"type\":\"start\",\"pid\":5}\n");  // cut short
    CHECK(Bed::error_of(bed.call("exec", {{"sandbox", "sbx_1"}, {"shell", "x"}}))["code"] == "bad_response");
    bed.api.answer(409, R"({"ok":false,"status":409,"code":"invalid_state","message":"stopped"})");
    CHECK(Bed::error_of(bed.call("exec", {{"sandbox", "sbx_1"}, {"shell", "x"}}))["code"] == "invalid_state");
}

TEST_CASE("exec_start, exec_output from an offset, exec_status") {
    Bed bed;
    bed.api.answer(201, R"({"ok":true,"process":{"id":"p1","pid":7}})");
    CHECK(bed.call("exec_start", {{"sandbox", "s"}, {"command", {"sleep", "9"}}})["structuredContent"] ==
          Json{{"process", "p1"}, {"pid", 7}});
    CHECK(Json::parse(bed.api.calls.at(0).body) == Json{{"command", {"sleep", "9"}}, {"detach", true}});

    // Everything there, still running.
    bed.api.answer(200, "id: 8\nevent: output\ndata: " + base64_encode("line1\n") + "\n\nevent: running\ndata: {}\n\n",
                   "text/event-stream");
    Json r = bed.call("exec_output", {{"sandbox", "s"}, {"process", "p1"}, {"offset", 2}})["structuredContent"];
    CHECK(bed.api.calls.at(1).target == "/v1/sandboxes/s/processes/p1/output?offset=2&follow=false");
    CHECK(r == Json{{"output", "line1\n"}, {"offset", 2}, {"nextOffset", 8}, {"more", false}, {"running", true},
                    {"exitCode", nullptr}, {"signal", nullptr}});

    // More than asked for: cut at maxBytes, the rest next time; how it stands from exec_status.
    bed.api.answer(200, "id: 10\nevent: output\ndata: " + base64_encode("0123456789") +
                            "\n\nevent: exit\ndata: {\"exitCode\":0,\"signal\":null}\n\n");
    bed.api.answer(200, R"({"ok":true,"process":{"id":"p1","running":false,"exitCode":0,"signal":null,"tail":""}})");
    r = bed.call("exec_output", {{"sandbox", "s"}, {"process", "p1"}, {"maxBytes", 4}})["structuredContent"];
    CHECK(r["output"] == "0123");
    CHECK(r["nextOffset"] == 4);
    CHECK(r["more"] == true);
    CHECK(r["running"] == false);
    CHECK(r["exitCode"] == 0);

    bed.api.answer(200, R"({"ok":true,"process":{"id":"p1","running":true,"tail":")" + base64_encode("tail\n") + "\"}}");
    CHECK(bed.call("exec_status", {{"sandbox", "s"}, {"process", "p1"}})["structuredContent"]["tail"] == "tail\n");
    bed.api.answer(400, R"({"ok":false,"status":400,"code":"invalid_argument","message":"offset 99 is past the end"})");
    CHECK(Bed::error_of(bed.call("exec_output", {{"sandbox", "s"}, {"process", "p1"}, {"offset", 99}}))["code"] ==
          "invalid_argument");
}

TEST_CASE("exec_start with openStdin, and write_stdin until the process took it all") {
    Bed bed;
    bed.api.answer(201, R"({"ok":true,"process":{"id":"p2","pid":8}})");
    bed.call("exec_start", {{"sandbox", "s"}, {"command", {"cat"}}, {"openStdin", true}});
    CHECK(Json::parse(bed.api.calls.at(0).body) == Json{{"command", {"cat"}}, {"detach", true}, {"stdinOpen", true}});
    bed.api.answer(200, R"({"ok":true,"written":2,"open":true})");  // the pipe took part of it
    bed.api.answer(200, R"({"ok":true,"written":3,"open":false})");  // the rest, then EOF
    Json r = bed.call("write_stdin", {{"sandbox", "s"}, {"process", "p2"}, {"text", "hello"}, {"eof", true}})["structuredContent"];
    CHECK(r == Json{{"written", 5}, {"open", false}, {"complete", true}});
    CHECK(bed.api.calls.at(1).target == "/v1/sandboxes/s/processes/p2/stdin");
    CHECK(Json::parse(bed.api.calls.at(1).body) == Json{{"data", base64_encode("hello")}, {"eof", true}});
    CHECK(Json::parse(bed.api.calls.at(2).body) == Json{{"data", base64_encode("llo")}, {"eof", true}});
    bed.api.answer(200, R"({"ok":true,"written":0,"open":false})");  // the process closed its stdin
    r = bed.call("write_stdin", {{"sandbox", "s"}, {"process", "p2"}, {"base64", base64_encode("\x01\x02")}})["structuredContent"];
    CHECK(r == Json{{"written", 0}, {"open", false}, {"complete", false}});
    CHECK(Bed::error_of(bed.call("write_stdin", {{"sandbox", "s"}, {"process", "p2"}, {"text", "a"}, {"base64", "YQ=="}}))["code"] ==
          "invalid_argument");
}

TEST_CASE("read_file, write_file, list_files") {
    Bed bed;
    bed.api.answer(200, R"({"ok":true,"stat":{"type":"file","size":4}})");
    bed.api.answer(200, std::string("a\xff\x00z", 4), "application/octet-stream");
    Json r = bed.call("read_file", {{"sandbox", "s"}, {"path", "/root/b in"}})["structuredContent"];
    CHECK(bed.api.calls.at(0).target == "/v1/sandboxes/s/files/stat?path=%2Froot%2Fb%20in");
    CHECK(r["encoding"] == "base64");
    CHECK(base64_decode(r["content"].get<std::string>()).value() == std::string("a\xff\x00z", 4));
    bed.api.answer(200, R"({"ok":true,"stat":{"type":"file","size":99999999}})");
    CHECK(Bed::error_of(bed.call("read_file", {{"sandbox", "s"}, {"path", "/big"}}))["code"] == "too_large");
    bed.api.answer(200, R"({"ok":true,"stat":{"type":"dir","size":0}})");
    CHECK(Bed::error_of(bed.call("read_file", {{"sandbox", "s"}, {"path", "/d"}}))["code"] == "invalid_argument");

    bed.api.answer(200, R"({"ok":true,"bytes":3})");
    r = bed.call("write_file", {{"sandbox", "s"}, {"path", "/x"}, {"content", base64_encode("\x01\x02\x03")},
                                {"encoding", "base64"}, {"mode", "0755"}})["structuredContent"];
    CHECK(r == Json{{"path", "/x"}, {"bytes", 3}});
    const ApiCall& put = bed.api.calls.back();
    CHECK(put.method == "PUT");
    CHECK(put.target == "/v1/sandboxes/s/files?path=%2Fx&mode=0755");
    CHECK(put.body == "\x01\x02\x03");
    CHECK(Bed::error_of(bed.call("write_file", {{"sandbox", "s"}, {"path", "/x"}, {"content", "!!"}, {"encoding", "base64"}}))["code"] ==
          "invalid_argument");

    bed.api.answer(200, R"({"ok":true,"entries":[{"name":"a","type":"file"}]})");
    CHECK(bed.call("list_files", {{"sandbox", "s"}, {"path", "/"}})["structuredContent"]["entries"][0]["name"] == "a");
}

TEST_CASE("desktop_start and desktop_status pass the desktop on") {
    Bed bed;
    const Json desktop = {{"running", true},  {"sessionRunning", true}, {"display", 1},
                          {"width", 1024},    {"height", 768},          {"vncPort", 5901},
                          {"started", true},  {"url", "https://d-desktop.sbx.localhost/vnc.html?_token=t"},
                          {"viewOnlyUrl", nullptr}};
    bed.api.answer(200, Json{{"ok", true}, {"requestId", "req_1"}, {"warnings", Json::array()}, {"desktop", desktop}}.dump());
    Json r = bed.call("desktop_start", {{"sandbox", "sbx 1"}, {"width", 1024}, {"height", 768}});
    CHECK(r["structuredContent"] == Json{{"desktop", desktop}, {"warnings", Json::array()}});
    CHECK(bed.api.calls.at(0).method == "POST");
    CHECK(bed.api.calls.at(0).target == "/v1/sandboxes/sbx%201/desktop");
    CHECK(Json::parse(bed.api.calls.at(0).body) == Json{{"width", 1024}, {"height", 768}});
    CHECK(r["content"].size() == 1);
    CHECK(Bed::error_of(bed.call("desktop_start", {{"sandbox", "s"}, {"width", 10}}))["message"] ==
          "width: must be at least 64");

    bed.api.answer(200, Json{{"ok", true}, {"desktop", {{"running", false}, {"display", nullptr}, {"url", nullptr}}}}.dump());
    r = bed.call("desktop_status", {{"sandbox", "s"}});
    CHECK(bed.api.calls.at(1).method == "GET");
    CHECK(bed.api.calls.at(1).target == "/v1/sandboxes/s/desktop");
    CHECK(r["structuredContent"]["desktop"]["running"] == false);
    bed.api.answer(409, R"({"ok":false,"status":409,"code":"invalid_state","message":"Xtigervnc is not installed"})");
    CHECK(Bed::error_of(bed.call("desktop_start", {{"sandbox", "s"}}))["code"] == "invalid_state");
}

TEST_CASE("desktop_action: the computer-use action as the REST body, images as image content") {
    Bed bed;
    bed.api.answer(200, R"({"ok":true,"action":"left_click_drag","result":{}})");
    Json r = bed.call("desktop_action", {{"sandbox", "s"}, {"action", "left_click_drag"},
                                         {"start_coordinate", {1, 2}}, {"coordinate", {30, 40}}});
    CHECK(bed.api.calls.at(0).target == "/v1/sandboxes/s/desktop/actions");
    CHECK(Json::parse(bed.api.calls.at(0).body) ==
          Json{{"action", "left_click_drag"}, {"start_coordinate", {1, 2}}, {"coordinate", {30, 40}}});
    CHECK(r["structuredContent"] == Json{{"action", "left_click_drag"}, {"result", Json::object()}});
    CHECK(r["content"].size() == 1);

    bed.api.answer(200, R"({"ok":true,"action":"scroll","result":{}})");
    bed.call("desktop_action", {{"sandbox", "s"}, {"action", "scroll"}, {"coordinate", {5, 6}},
                                {"scroll_direction", "down"}, {"scroll_amount", 3}, {"text", "shift"}});
    CHECK(Json::parse(bed.api.calls.at(1).body) == Json{{"action", "scroll"}, {"coordinate", {5, 6}},
                                                       {"scroll_direction", "down"}, {"scroll_amount", 3},
                                                       {"text", "shift"}});
    bed.api.answer(200, R"({"ok":true,"action":"cursor_position","result":{"x":7,"y":8}})");
    r = bed.call("desktop_action", {{"sandbox", "s"}, {"action", "cursor_position"}});
    CHECK(r["structuredContent"]["result"] == Json{{"x", 7}, {"y", 8}});
    bed.api.answer(200, R"({"ok":true,"action":"wait","result":{}})");
    bed.call("desktop_action", {{"sandbox", "s"}, {"action", "wait"}, {"duration", 0.5}});
    CHECK(Json::parse(bed.api.calls.at(3).body) == Json{{"action", "wait"}, {"duration", 0.5}});

    const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + "rest of it";
    bed.api.answer(200, Json{{"ok", true}, {"action", "screenshot"},
                             {"result", {{"png", base64_encode(png)}, {"width", 640}, {"height", 400}}}}.dump());
    r = bed.call("desktop_action", {{"sandbox", "s"}, {"action", "screenshot"}, {"max_width", 640}});
    CHECK(Json::parse(bed.api.calls.at(4).body) == Json{{"action", "screenshot"}, {"max_width", 640}});
    const Json want = {{"action", "screenshot"}, {"result", {{"width", 640}, {"height", 400}, {"bytes", png.size()}}}};
    CHECK(r["structuredContent"] == want);
    REQUIRE(r["content"].size() == 2);
    CHECK(Json::parse(r["content"][0]["text"].get<std::string>()) == want);
    CHECK(r["content"][1] == Json{{"type", "image"}, {"data", base64_encode(png)}, {"mimeType", "image/png"}});

    bed.api.answer(200, Json{{"ok", true}, {"action", "zoom"}, {"result", {{"png", base64_encode(png)}, {"width", 2}, {"height", 2}}}}.dump());
    r = bed.call("desktop_action", {{"sandbox", "s"}, {"action", "zoom"}, {"region", {0, 0, 2, 2}}});
    CHECK(r["content"].at(1)["type"] == "image");
    bed.api.answer(200, R"({"ok":true,"action":"zoom","result":{"png":"!!","width":2,"height":2}})");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "zoom"}, {"region", {0, 0, 2, 2}}}))["code"] ==
          "bad_response");
    bed.api.answer(200, R"({"ok":true,"action":"key"})");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "key"}, {"text", "a"}}))["code"] ==
          "bad_response");
    bed.api.answer(409, R"({"ok":false,"status":409,"code":"invalid_state","message":"no desktop runs"})");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "screenshot"}}))["code"] == "invalid_state");
    const std::size_t asked = bed.api.calls.size();

    // The schema holds the API's names, types and bounds: refused before any call.
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "click"}}))["code"] == "invalid_argument");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "mouse_move"}, {"coordinate", {1}}}))["message"] ==
          "coordinate: must have at least 2 items");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "mouse_move"}, {"coordinate", {1, -1}}}))["message"] ==
          "coordinate[1]: must be at least 0");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "scroll"}, {"scroll_amount", 101}}))["code"] ==
          "invalid_argument");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "wait"}, {"duration", "1"}}))["code"] ==
          "invalid_argument");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}, {"action", "key"}, {"keys", "a"}}))["message"] ==
          "arguments: unknown field keys");
    CHECK(Bed::error_of(bed.call("desktop_action", {{"sandbox", "s"}}))["message"] == "arguments: action is required");
    CHECK(bed.api.calls.size() == asked);
}

TEST_CASE("desktop_action's schema offers exactly the API's actions and fields") {
    const auto tools = sandbox_tools();
    const auto tool = std::find_if(tools.begin(), tools.end(), [](const ToolSpec& t) { return t.name == "desktop_action"; });
    REQUIRE(tool != tools.end());
    const Json properties = tool->input_schema["properties"];
    std::vector<std::string> fields;
    for (const auto& [name, value] : properties.items()) {
        fields.push_back(name);
    }
    std::sort(fields.begin(), fields.end());
    // docs/api.md POST …/desktop/actions, and the sandbox.
    CHECK(fields == std::vector<std::string>{"action", "coordinate", "duration", "max_height", "max_width", "region",
                                             "sandbox", "scroll_amount", "scroll_direction", "start_coordinate", "text"});
    CHECK(properties["action"]["enum"] ==
          Json{"screenshot", "zoom", "mouse_move", "left_click", "right_click", "middle_click", "double_click",
               "triple_click", "left_click_drag", "left_mouse_down", "left_mouse_up", "scroll", "type", "key",
               "hold_key", "cursor_position", "wait"});
    CHECK(tool->annotations["readOnlyHint"] == false);
}

TEST_CASE("2026-07-28: stateless requests, their _meta and versions") {
    Bed bed;
    Json r = bed.request("server/discover", modern_meta());
    CHECK(r["result"]["resultType"] == "complete");
    CHECK(r["result"]["supportedVersions"][0] == "2026-07-28");
    CHECK(r["result"]["capabilities"]["tools"].is_object());
    CHECK(r["result"]["cacheScope"] == "public");
    CHECK(r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "sandboxer");
    r = bed.request("tools/list", modern_meta());
    CHECK(r["result"]["resultType"] == "complete");
    CHECK(r["result"]["ttlMs"].is_number_integer());
    CHECK(r["result"]["tools"].size() == bed.protocol.tools().size());
    CHECK(bed.request("initialize", modern_meta())["error"]["code"] == rpc::kMethodNotFound);
    CHECK(bed.request("ping", modern_meta())["error"]["code"] == rpc::kMethodNotFound);
    r = bed.request("tools/list", modern_meta("2099-01-01"));
    CHECK(r["error"]["code"] == rpc::kUnsupportedVersion);
    CHECK(r["error"]["data"]["requested"] == "2099-01-01");
    Json no_caps = modern_meta();
    no_caps["_meta"].erase("io.modelcontextprotocol/clientCapabilities");
    CHECK(bed.request("tools/list", no_caps)["error"]["code"] == rpc::kInvalidParams);
    CHECK(bed.request("server/discover")["error"]["code"] == rpc::kInvalidParams);  // no _meta at all
    bed.api.answer(200, R"({"ok":true,"snapshots":[]})");
    Json params = modern_meta();
    params["name"] = "snapshot_list";
    r = bed.request("tools/call", params);
    CHECK(r["result"]["resultType"] == "complete");
    CHECK(r["result"]["structuredContent"] == Json{{"snapshots", Json::array()}});
    CHECK(bed.session.protocol_version.empty());  // no session was touched
}

TEST_CASE("the schema subset and UTF-8") {
    const Json s = Json::parse(R"({"type":"object","additionalProperties":false,"required":["a"],"properties":{
        "a":{"type":"integer","minimum":1,"maximum":3},"b":{"type":["string","null"],"maxLength":2},
        "c":{"type":"object","additionalProperties":{"type":"string"}},"d":{"enum":["x","y"]}}})");
    CHECK(!schema_violation(s, Json{{"a", 2}, {"b", "éé"}, {"c", {{"k", "v"}}}, {"d", "y"}}));
    CHECK(schema_violation(s, Json{{"a", 4}}).value() == "a: must be at most 3");
    CHECK(schema_violation(s, Json{{"a", 1.5}}).value() == "a: must be integer");
    CHECK(schema_violation(s, Json{{"a", 1}, {"b", "abc"}}).value() == "b: must have at most 2 characters");
    CHECK(schema_violation(s, Json{{"a", 1}, {"c", {{"k", 1}}}}).value() == "c.k: must be string");
    CHECK(schema_violation(s, Json{{"a", 1}, {"d", "z"}}).value() == R"(d: must be one of ["x","y"])");
    CHECK(schema_violation(s, Json{{"a", 1}, {"e", 1}}).value() == "arguments: unknown field e");
    CHECK(unknown_keywords(Json::parse(R"({"type":"object","properties":{"a":{"pattern":"x"}}})")) ==
          std::vector<std::string>{"pattern"});
    CHECK(is_utf8("héllo €𝄞"));
    CHECK(!is_utf8("\xc0\xaf"));          // overlong
    CHECK(!is_utf8("\xed\xa0\x80"));      // a surrogate
    CHECK(!is_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
    CHECK(to_utf8("a\xe2\x82") == "a\xEF\xBF\xBD\xEF\xBF\xBD");  // a cut sequence
}

TEST_CASE("Streamable HTTP: which revision a POST speaks, and its headers") {
    const Json legacy_body = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}, {"params", Json::object()}};
    Json modern_body = {{"jsonrpc", "2.0"}, {"id", 2}, {"method", "tools/call"}, {"params", modern_meta()}};
    modern_body["params"]["name"] = "exec";
    CHECK(era_of(legacy_body, {}) == Era::Legacy);
    CHECK(era_of(legacy_body, {.protocol_version = "2025-11-25"}) == Era::Legacy);
    CHECK(era_of(legacy_body, {.protocol_version = "2026-07-28"}) == Era::Modern);  // then -32602: no _meta
    CHECK(era_of(modern_body, {}) == Era::Modern);
    CHECK(era_of(modern_body, {.has_session = true}) == Era::Legacy);

    const PostHeaders good{.protocol_version = "2026-07-28", .method = "tools/call", .name = "exec"};
    CHECK(!header_mismatch(modern_body, good));
    PostHeaders h = good;
    h.name = "=?base64?" + base64_encode("exec") + "?=";
    CHECK(!header_mismatch(modern_body, h));
    for (PostHeaders bad : {PostHeaders{.method = "tools/call", .name = "exec"},
                            PostHeaders{.protocol_version = "2025-11-25", .method = "tools/call", .name = "exec"},
                            PostHeaders{.protocol_version = "2026-07-28", .name = "exec"},
                            PostHeaders{.protocol_version = "2026-07-28", .method = "tools/list", .name = "exec"},
                            PostHeaders{.protocol_version = "2026-07-28", .method = "tools/call"},
                            PostHeaders{.protocol_version = "2026-07-28", .method = "tools/call", .name = "read_file"},
                            PostHeaders{.protocol_version = "2026-07-28", .method = "tools/call", .name = "=?base64?!!?="}}) {
        auto error = header_mismatch(modern_body, bad);
        REQUIRE(error.has_value());
        CHECK((*error)["error"]["code"] == rpc::kHeaderMismatch);
        CHECK((*error)["id"] == 2);
        CHECK(http_status(*error, Era::Modern) == 400);
    }
    // A body lacking method or holding params of another type is a
    // mismatch, never a read past the object (found by fuzz/sbxd_http).
    for (const Json& odd : {Json{{"jsonrpc", "2.0"}, {"id", 3}},
                            Json{{"jsonrpc", "2.0"}, {"id", 3}, {"method", 7}, {"params", Json::array()}},
                            Json{{"jsonrpc", "2.0"}, {"id", 3}, {"method", "tools/call"}, {"params", "x"}}}) {
        auto error = header_mismatch(odd, good);
        REQUIRE(error.has_value());
        CHECK((*error)["error"]["code"] == rpc::kHeaderMismatch);
    }
    CHECK(http_status(rpc_error(1, rpc::kMethodNotFound, "x"), Era::Modern) == 404);
    CHECK(http_status(rpc_error(1, rpc::kMethodNotFound, "x"), Era::Legacy) == 200);
    CHECK(http_status(rpc_error(1, rpc::kUnsupportedVersion, "x"), Era::Modern) == 400);
    CHECK(http_status(rpc_error(nullptr, rpc::kParseError, "x"), Era::Legacy) == 400);
    CHECK(http_status(Json{{"result", Json::object()}}, Era::Modern) == 200);

    CHECK(origin_allowed("http://localhost:3000", {}));
    CHECK(origin_allowed("https://127.0.0.1", {}));
    CHECK(origin_allowed("http://[::1]:8080", {}));
    CHECK(origin_allowed("http://app.localhost:5173", {}));
    CHECK(!origin_allowed("http://evil.example.com", {}));
    CHECK(!origin_allowed("http://localhost.evil.example.com", {}));
    CHECK(!origin_allowed("null", {}));
    CHECK(origin_allowed("https://ide.example.com", {"https://ide.example.com"}));
    CHECK(host_allowed("localhost:7070", {}));
    CHECK(host_allowed("127.0.0.1:7070", {}));
    CHECK(host_allowed("10.1.2.3", {}));
    CHECK(host_allowed("[fe80::1]:80", {}));
    CHECK(!host_allowed("evil.example.com", {}));
    CHECK(!host_allowed("evil.example.com:7070", {}));
    CHECK(host_allowed("sbx.example.com:7070", {"sbx.example.com"}));
}

// The pure parts of sbx: flags -> request bodies and targets, SBX_HOST,
// the NDJSON and SSE decoders, base64, error events and tables, forward's
// ports and targets, the ssh setup, the desktop's actions.
#include <doctest/doctest.h>

#include "host-tools/sbx/api_requests.hpp"
#include "host-tools/sbx/desktop_actions.hpp"
#include "host-tools/sbx/http_client.hpp"
#include "host-tools/sbx/output.hpp"
#include "host-tools/sbx/stream_decoders.hpp"
#include "host-tools/sbx/ssh_setup.hpp"
#include "host-tools/sbx/tcp_bridge.hpp"
#include "host-tools/sbx/ws_client.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace sbx;
using namespace sbx::cli;

namespace {

std::optional<std::string> fake_env(const std::string& name) {
    return name == "HOME_VAR" ? std::optional<std::string>("from-here") : std::nullopt;
}

}  // namespace

TEST_CASE("SBX_HOST: unix:PATH and http://HOST:PORT") {
    auto unix_host = parse_host_address("unix:/run/x.sock");
    REQUIRE(unix_host);
    CHECK(unix_host->kind == HostAddress::Kind::Unix);
    CHECK(unix_host->path == "/run/x.sock");
    CHECK(unix_host->to_string() == "unix:/run/x.sock");

    auto tcp = parse_host_address("http://127.0.0.1:8080");
    REQUIRE(tcp);
    CHECK(tcp->kind == HostAddress::Kind::Tcp);
    CHECK(tcp->host == "127.0.0.1");
    CHECK(tcp->port == "8080");

    auto v6 = parse_host_address("http://[::1]:9/");
    REQUIRE(v6);
    CHECK(v6->host == "::1");
    CHECK(v6->port == "9");
    CHECK(v6->to_string() == "http://[::1]:9");

    auto no_port = parse_host_address("http://sbxd.local");
    REQUIRE(no_port);
    CHECK(no_port->port == "80");

    for (const char* bad : {"unix:", "tcp:1.2.3.4:5", "http://", "http://h:99999", "http://h:x",
                            "https://h:1", "http://[::1", "/run/sbxd.sock"}) {
        auto parsed = parse_host_address(bad);
        REQUIRE_MESSAGE(!parsed, bad);
        CHECK(parsed.error().code == "usage");
    }
}

TEST_CASE("new: flags become the create body") {
    CreateOptions options;
    CHECK(create_body(options, fake_env).value() == Json::object());

    options.size = "small";
    options.cpus = 2;
    options.memory = "2G";
    options.disk = "20";
    options.from = "py-ready";
    options.labels = {"owner=alice", "run=a=b"};
    options.env = {"FOO=bar", "HOME_VAR", "EMPTY="};
    options.no_env = true;
    options.idle_minutes = 15;
    options.ttl = "2h30m";
    Json body = create_body(options, fake_env).value();
    CHECK(body == Json{{"size", "small"},
                       {"cpus", 2},
                       {"memoryMib", 2048},
                       {"diskGib", 20},
                       {"from", "py-ready"},
                       {"labels", {{"owner", "alice"}, {"run", "a=b"}}},
                       {"env", {{"EMPTY", ""}, {"FOO", "bar"}, {"HOME_VAR", "from-here"}}},
                       {"noEnv", true},
                       {"idleMinutes", 15},
                       {"ttl", "2h30m"}});

    CreateOptions zero_idle;
    zero_idle.idle_minutes = 0;
    zero_idle.no_auto_stop = true;
    zero_idle.cold = true;
    CHECK(create_body(zero_idle, fake_env).value() ==
          Json{{"idleMinutes", 0}, {"noAutoStop", true}, {"cold", true}});
}

TEST_CASE("new: what the CLI refuses before asking sbxd") {
    auto refused = [](CreateOptions options) {
        auto body = create_body(options, fake_env);
        return !body && body.error().code == "usage";
    };
    CreateOptions o;
    o.labels = {"novalue"};
    CHECK(refused(o));
    o.labels = {"=v"};
    CHECK(refused(o));
    o.labels = {"k=1", "k=2"};
    CHECK(refused(o));
    o = {};
    o.env = {"UNSET_HERE"};
    CHECK(refused(o));
    o = {};
    o.memory = "4T";
    CHECK(refused(o));
    o.memory = "lots";
    CHECK(refused(o));
    o = {};
    o.ttl = "1h";
    o.no_auto_stop = true;
    CHECK(refused(o));
}

TEST_CASE("sizes and durations") {
    CHECK(parse_memory_mib("512").value() == 512);
    CHECK(parse_memory_mib("512M").value() == 512);
    CHECK(parse_memory_mib("4GiB").value() == 4096);
    CHECK(parse_memory_mib("4g").value() == 4096);
    CHECK(parse_disk_gib("8").value() == 8);
    CHECK(parse_disk_gib("8G").value() == 8);
    CHECK(!parse_disk_gib("8M"));
    CHECK(parse_timeout_ms("30").value() == 30'000);
    CHECK(parse_timeout_ms("500ms").value() == 500);
    CHECK(parse_timeout_ms("2m").value() == 120'000);
    CHECK(parse_timeout_ms("1h").value() == 3'600'000);
    CHECK(!parse_timeout_ms("-1"));
    CHECK(!parse_timeout_ms("s"));
    CHECK(!parse_timeout_ms("99999999999999999999"));
    CHECK(!parse_timeout_ms("18446744073709551615h"));
    CHECK(parse_byte_count("4096", "--tail").value() == 4096);
    CHECK(parse_byte_count("64K", "--tail").value() == 65536);
    CHECK(parse_byte_count("2MiB", "--tail").value() == 2u << 20);
    CHECK(parse_byte_count("0", "--tail").value() == 0);
    CHECK(!parse_byte_count("-3", "--tail"));
    CHECK(!parse_byte_count("3x", "--tail"));
    CHECK(!parse_byte_count("", "--tail"));
    CHECK(parse_byte_count("-1", "--tail").error().code == "usage");
}

TEST_CASE("ttl and idle: the value becomes the body") {
    CHECK(ttl_body("3600").value() == Json{{"ttl", 3600}});
    CHECK(ttl_body("2h").value() == Json{{"ttl", 7200}});
    CHECK(ttl_body("7d").value() == Json{{"ttl", 604'800}});
    CHECK(ttl_body("90s").value() == Json{{"ttl", 90}});
    CHECK(ttl_body("off").value() == Json{{"noAutoStop", true}});
    CHECK(ttl_body("-5").error().code == "usage");
    CHECK(ttl_body("soon").error().code == "usage");
    CHECK(ttl_body("5y").error().code == "usage");
    CHECK(idle_body("15").value() == Json{{"idleMinutes", 15}});
    CHECK(idle_body("0").value() == Json{{"idleMinutes", 0}});
    CHECK(idle_body("off").value() == Json{{"idleMinutes", 0}});
    CHECK(idle_body("15m").error().code == "usage");
    CHECK(idle_body("").error().code == "usage");
}

TEST_CASE("egress: a word, or networks as an allow list") {
    CHECK(egress_body("internet").value() == Json{{"egress", "internet"}});
    CHECK(egress_body("deny-all").value() == Json{{"egress", "deny-all"}});
    CHECK(egress_body("203.0.113.0/24,198.51.100.7/32").value() ==
          Json{{"egress", "allow-list"}, {"egressAllow", {"203.0.113.0/24", "198.51.100.7/32"}}});
    CHECK(egress_body("203.0.113.0/24,").value() ==
          Json{{"egress", "allow-list"}, {"egressAllow", {"203.0.113.0/24"}}});
    CHECK(egress_body("").error().code == "usage");
    CHECK(egress_body(",").error().code == "usage");
    CreateOptions options;
    options.egress = "deny-all";
    CHECK(create_body(options, fake_env).value() == Json{{"egress", "deny-all"}});
}

TEST_CASE("exec: flags become the exec body") {
    ExecOptions options;
    CHECK(!exec_body(options, fake_env));
    options.command = {"python3", "-c", "print(1)"};
    CHECK(exec_body(options, fake_env).value() == Json{{"command", {"python3", "-c", "print(1)"}}});
    options.env = {"A=1"};
    options.cwd = "/tmp";
    options.user = "nobody";
    options.timeout = "5s";
    options.stdin_bytes = std::string("hi\n\0x", 5);
    options.detach = true;
    CHECK(exec_body(options, fake_env).value() == Json{{"command", {"python3", "-c", "print(1)"}},
                                                       {"env", {{"A", "1"}}},
                                                       {"cwd", "/tmp"},
                                                       {"user", "nobody"},
                                                       {"timeoutMs", 5000},
                                                       {"stdin", "aGkKAHg="},
                                                       {"detach", true}});
}

TEST_CASE("targets: segments and query values are encoded") {
    CHECK(target({"v1", "sandboxes"}) == "/v1/sandboxes");
    CHECK(target({"v1", "sandboxes", "a/b?c"}) == "/v1/sandboxes/a%2Fb%3Fc");
    CHECK(target({"v1", "events"}, {{"after", "7"}}) == "/v1/events?after=7");
    CHECK(target({"v1", "sandboxes", "sbx_1", "files"}, {{"path", "/root/a b&c#d"}}) ==
          "/v1/sandboxes/sbx_1/files?path=/root/a%20b%26c%23d");
    CHECK(list_target({}, {}).value() == "/v1/sandboxes");
    CHECK(list_target({"owner=alice", "run=42"}, {"running", "stopped,paused"}).value() ==
          "/v1/sandboxes?labels=owner=alice,run=42&state=running,stopped,paused");
    CHECK(!list_target({"owner"}, {}));
}

TEST_CASE("scp operands") {
    auto remote = parse_copy_end("sbx_1:/root/x").value();
    CHECK(remote.sandbox == "sbx_1");
    CHECK(remote.path == "/root/x");
    CHECK(parse_copy_end("./a:b").value().sandbox.empty());
    CHECK(parse_copy_end("/tmp/a:b").value().path == "/tmp/a:b");
    CHECK(parse_copy_end("file.txt").value().path == "file.txt");
    CHECK(!parse_copy_end("sbx_1:relative"));
    CHECK(!parse_copy_end(""));
    CHECK(copy_destination("/tmp/data.bin", "/root/", false) == "/root/data.bin");
    CHECK(copy_destination("/tmp/data.bin", "/root", true) == "/root/data.bin");
    CHECK(copy_destination("/tmp/data.bin", "/root/new.bin", false) == "/root/new.bin");
    CHECK(copy_destination("data.bin", ".", true) == "./data.bin");
}

TEST_CASE("scp -r: where a tree lands") {
    CHECK(tree_destination("./proj", "/root/proj", false) == "/root/proj");
    CHECK(tree_destination("./proj", "/root", true) == "/root/proj");
    CHECK(tree_destination("a/b/proj/", "/root/", true) == "/root/proj");
    CHECK(tree_destination("/root/proj", "out", false) == "out");
    CHECK(tree_destination("/root/proj", "out/", true) == "out/proj");
    CHECK(tree_destination("/", "out", true) == "out");
    CHECK(tree_destination(".", "/root/x", true) == "/root/x");
    CHECK(tree_destination("src/..", "/root/x", true) == "/root/x");
    CHECK(tree_destination("proj", "/", true) == "/proj");
}

TEST_CASE("base64 both ways") {
    for (std::string text : {std::string(), std::string("a"), std::string("ab"), std::string("abc"),
                             std::string("\0\xff\x10 binary", 10)}) {
        CHECK(base64_decode(base64_encode(text)).value() == text);
    }
    CHECK(base64_encode("hello") == "aGVsbG8=");
    CHECK(!base64_decode("aGVsbG8"));       // not a multiple of 4
    CHECK(!base64_decode("aGV*bG8="));      // not the alphabet
    CHECK(!base64_decode("aGVsbG8=aGVs"));  // data after padding
}

TEST_CASE("NDJSON: lines split across pieces of any size") {
    std::string stream =
        "{\"type\":\"start\",\"pid\":1}\n{\"type\":\"stdout\",\"data\":\"aGk=\"}\r\n\n{\"type\":\"exit\","
        "\"exitCode\":3}\n";
    for (std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{7}, stream.size()}) {
        LineSplitter lines;
        std::vector<std::string> got;
        for (std::size_t i = 0; i < stream.size(); i += piece) {
            for (auto& line : lines.feed(std::string_view(stream).substr(i, piece))) {
                got.push_back(line);
            }
        }
        REQUIRE(got.size() == 3);
        CHECK(Json::parse(got[1])["data"] == "aGk=");
        CHECK(Json::parse(got[2])["exitCode"] == 3);
        CHECK(lines.partial().empty());
    }
    LineSplitter cut;
    CHECK(cut.feed("{\"type\":\"ex").empty());
    CHECK(cut.partial() == "{\"type\":\"ex");
}

TEST_CASE("SSE: events, ids, comments and line ends") {
    std::string stream =
        ": keep-alive\n"
        "id: 5\nevent: output\ndata: aGVsbG8=\n\n"
        "id: 11\r\nevent: output\r\ndata: IHdvcmxk\r\n\r\n"
        "event: exit\rdata: {\"exitCode\":0,\rdata:\"signal\":null}\r\r";
    for (std::size_t piece : {std::size_t{1}, std::size_t{3}, stream.size()}) {
        SseParser parser;
        std::vector<SseEvent> events;
        for (std::size_t i = 0; i < stream.size(); i += piece) {
            for (auto& event : parser.feed(std::string_view(stream).substr(i, piece))) {
                events.push_back(event);
            }
        }
        REQUIRE(events.size() == 3);
        CHECK(events[0].event == "output");
        CHECK(events[0].id == "5");
        CHECK(events[0].data == "aGVsbG8=");
        CHECK(events[1].id == "11");
        CHECK(events[1].data == "IHdvcmxk");
        CHECK(events[2].event == "exit");
        CHECK(!events[2].id);
        CHECK(events[2].data == "{\"exitCode\":0,\n\"signal\":null}");
        CHECK(parser.last_id() == "11");
    }
    SseParser no_data;
    CHECK(no_data.feed("event: output\n\n").empty());
    CHECK(no_data.feed("data\n\n").front().data.empty());
}

TEST_CASE("errors: the API's body, and failures without one") {
    HttpReply reply;
    reply.status = 404;
    reply.request_id = "req_header";
    reply.body =
        R"({"ok":false,"status":404,"code":"not_found","message":"no sandbox sbx_missing","requestId":"req_1"})";
    Failure failure = failure_of(reply);
    CHECK(failure.exit_code == kExitApiError);
    CHECK(error_event(failure) == Json{{"type", "error"},
                                       {"status", 404},
                                       {"code", "not_found"},
                                       {"message", "no sandbox sbx_missing"},
                                       {"requestId", "req_1"}});
    CHECK(error_line(failure) == "sbx: no sandbox sbx_missing (not_found, HTTP 404, req_1)");

    reply.status = 502;
    reply.body = "<html>bad gateway</html>";
    reply.content_type = "text/html";
    failure = failure_of(reply);
    CHECK(failure.code == "bad_response");
    CHECK(failure.exit_code == kExitUnreachable);
    CHECK(error_event(failure)["requestId"] == "req_header");

    failure = failure_of(make_coded_error("unreachable", "cannot reach sbxd at unix:/x"));
    CHECK(failure.exit_code == kExitUnreachable);
    CHECK(error_event(failure)["status"].is_null());
    CHECK(error_event(failure)["requestId"].is_null());
    CHECK(failure_of(make_coded_error("usage", "bad flag")).exit_code == kExitUsage);
    CHECK(failure_of(make_coded_error("local", "no file")).exit_code == kExitLocal);
}

TEST_CASE("tables") {
    CHECK(format_table({"ID", "STATE", "LABELS"},
                       {{"sbx_1", "running", "a=b"}, {"sbx_long", "stopped\tx", "-"}}) ==
          "ID        STATE      LABELS\n"
          "sbx_1     running    a=b\n"
          "sbx_long  stopped x  -\n");
    CHECK(format_table({"A", "B"}, {}) == "A  B\n");
    CHECK(format_labels(Json{{"owner", "alice"}, {"run", "42"}}) == "owner=alice,run=42");
    CHECK(format_labels(Json::object()) == "-");
    Json sandbox = {{"id", "sbx_1"},     {"state", "running"},     {"size", "small"},          {"cpus", 2},
                    {"memoryMib", 4096}, {"labels", {{"k", "v"}}}, {"lastActivityAt", nullptr}};
    CHECK(sandbox_table(Json::array({sandbox})) ==
          "ID     STATE    SIZE   CPUS  MEMORY    LABELS  LAST ACTIVITY\n"
          "sbx_1  running  small  2     4096 MiB  k=v     -\n");
    CHECK(sandbox_details(Json{{"id", "sbx_1"}, {"envNames", {"A", "B"}}, {"startedAt", nullptr}}) ==
          "id:         sbx_1\n"
          "envNames:   A,B\n"
          "startedAt:  -\n");
    CHECK(shell_words(Json{"python3", "-c", "print('hi')", ""}) == "python3 -c 'print('\\''hi'\\'')' ''");
}

TEST_CASE("exec's WebSocket messages") {
    Json body = {{"command", {"cat"}}, {"stdin", "aGk="}, {"detach", true}, {"cwd", "/tmp"}};
    CHECK(ws_start_message(body, std::nullopt) == Json{{"command", {"cat"}}, {"cwd", "/tmp"}});
    CHECK(ws_start_message({{"shell", "tty"}}, TtySize{40, 120}) ==
          Json{{"shell", "tty"}, {"tty", {{"rows", 40}, {"cols", 120}}}});
    CHECK(Json::parse(ws_resize_message({50, 132})) == Json{{"type", "resize"}, {"rows", 50}, {"cols", 132}});
    CHECK(Json::parse(ws_signal_message(15)) == Json{{"type", "signal"}, {"signal", 15}});
    CHECK(Json::parse(ws_eof_message()) == Json{{"type", "eof"}});

    const std::string frame("\1a\0b", 4);
    auto out = decode_ws_output(frame);
    REQUIRE(out.has_value());
    CHECK(out->stream == 1);
    CHECK(out->bytes == std::string_view("a\0b", 3));
    auto err = decode_ws_output("\2");
    REQUIRE(err.has_value());
    CHECK(err->stream == 2);
    CHECK(err->bytes.empty());
    CHECK_FALSE(decode_ws_output("").has_value());
    CHECK(decode_ws_output("\3x").error().code == "bad_response");
}

TEST_CASE("forward: LOCAL:REMOTE and the TCP targets") {
    auto both = parse_port_pair("8080:80", true);
    REQUIRE(both);
    CHECK(both->first == 8080);
    CHECK(both->second == 80);
    auto same = parse_port_pair("5432", false);
    REQUIRE(same);
    CHECK((same->first == 5432 && same->second == 5432));
    auto any = parse_port_pair("0:22", true);
    REQUIRE(any);
    CHECK(any->first == 0);
    CHECK_FALSE(parse_port_pair("0:22", false));
    CHECK_FALSE(parse_port_pair("22:0", true));
    for (const char* bad : {"", ":", "80:", ":80", "65536:1", "a:b", "1:2:3", "-1:80", "80 :81"}) {
        auto r = parse_port_pair(bad, true);
        CHECK_MESSAGE(!r, bad);
        if (!r) {
            CHECK(r.error().code == "usage");
        }
    }
    CHECK(tcp_ws_target("sbx_1", 22) == "/v1/sandboxes/sbx_1/tcp/ws?port=22");
    CHECK(tcp_listen_target("sbx_1", 0) == "/v1/sandboxes/sbx_1/tcp/listen/ws?port=0");
    CHECK(tcp_accept_target("sbx_1", "c0a1") == "/v1/sandboxes/sbx_1/tcp/accept/ws?connection=c0a1");
    CHECK(tcp_ws_target("a b", 1) == "/v1/sandboxes/a%20b/tcp/ws?port=1");
}

TEST_CASE("ssh: config folder, host names, quoting, the stanza") {
    CHECK(*sbx_config_dir("/x/cfg", "/home/u") == "/x/cfg/sandboxer");
    CHECK(*sbx_config_dir(nullptr, "/home/u") == "/home/u/.config/sandboxer");
    CHECK(*sbx_config_dir("relative", "/home/u") == "/home/u/.config/sandboxer");  // XDG: absolute only
    CHECK_FALSE(sbx_config_dir(nullptr, nullptr));
    auto paths = ssh_paths("/home/u/.config/sandboxer");
    CHECK(paths.key == "/home/u/.config/sandboxer/ssh/id_ed25519");
    CHECK(paths.known_hosts == "/home/u/.config/sandboxer/ssh/known_hosts");

    CHECK(strip_sbx_suffix("sbx_1.sbx") == "sbx_1");
    CHECK(strip_sbx_suffix("sbx_1") == "sbx_1");
    CHECK(strip_sbx_suffix(".sbx") == ".sbx");
    CHECK(strip_sbx_suffix("a.sbx.sbx") == "a.sbx");

    CHECK(shell_quote("/usr/bin/sbx") == "/usr/bin/sbx");
    CHECK(shell_quote("/opt/my tools/sbx") == "'/opt/my tools/sbx'");
    CHECK(shell_quote("it's") == "'it'\\''s'");
    CHECK(shell_quote("") == "''");

    std::string stanza = ssh_config_stanza("/usr/bin/sbx", paths);
    CHECK(stanza.find("\nHost *.sbx\n") != std::string::npos);
    CHECK(stanza.find("    ProxyCommand /usr/bin/sbx ssh-proxy %h\n") != std::string::npos);
    CHECK(stanza.find("    User root\n") != std::string::npos);
    CHECK(stanza.find("    IdentityFile /home/u/.config/sandboxer/ssh/id_ed25519\n") != std::string::npos);
    CHECK(stanza.find("    UserKnownHostsFile /home/u/.config/sandboxer/ssh/known_hosts\n") != std::string::npos);
    CHECK(ssh_config_stanza("/usr/bin/sbx", ssh_paths("/home/a b")).find("IdentityFile \"/home/a b/ssh/id_ed25519\"") !=
          std::string::npos);
}

TEST_CASE("ssh: the stanza is appended to ~/.ssh/config once") {
    char dir_template[] = "/tmp/sbx-ssh-config-XXXXXX";
    REQUIRE(::mkdtemp(dir_template) != nullptr);
    const std::string dir = dir_template;
    const std::string config = dir + "/home/.ssh/config";
    const std::string stanza = ssh_config_stanza("/usr/bin/sbx", ssh_paths(dir + "/cfg"));

    auto added = install_ssh_config(config, stanza);
    REQUIRE(added);
    CHECK(*added);
    auto again = install_ssh_config(config, stanza);
    REQUIRE(again);
    CHECK_FALSE(*again);
    std::ifstream in(config);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str() == stanza);

    // An existing file keeps its contents; the stanza comes after them.
    const std::string other = dir + "/other";
    {
        std::ofstream out(other);
        out << "Host work\n    User me";  // no final newline
    }
    REQUIRE(install_ssh_config(other, stanza));
    std::ifstream in2(other);
    std::stringstream text2;
    text2 << in2.rdbuf();
    CHECK(text2.str() == "Host work\n    User me\n\n" + stanza);
    REQUIRE(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
}

TEST_CASE("desktop: the words after the id as computer-use actions") {
    auto body = [](std::vector<std::string> words, DesktopFlags flags = {}) {
        return desktop_action_body(words, flags);
    };
    CHECK(body({"click", "10", "20"})->dump() == R"({"action":"left_click","coordinate":[10,20]})");
    CHECK((*body({"click", "1", "2"}, {"right", false, false}))["action"] == "right_click");
    CHECK((*body({"click", "1", "2"}, {"middle", false, false}))["action"] == "middle_click");
    CHECK((*body({"click", "1", "2"}, {"left", true, false}))["action"] == "double_click");
    CHECK((*body({"click", "1", "2"}, {"left", false, true}))["action"] == "triple_click");
    CHECK(body({"move", "5", "6"})->dump() == R"({"action":"mouse_move","coordinate":[5,6]})");
    CHECK(body({"type", "hello world"})->dump() == R"({"action":"type","text":"hello world"})");
    CHECK(body({"key", "ctrl+s"})->dump() == R"({"action":"key","text":"ctrl+s"})");
    CHECK(body({"scroll", "5", "6", "down"})->dump() ==
          R"({"action":"scroll","coordinate":[5,6],"scroll_direction":"down","scroll_amount":3})");
    CHECK((*body({"scroll", "5", "6", "up", "10"}))["scroll_amount"] == 10);
    CHECK(body({"cursor"})->dump() == R"({"action":"cursor_position"})");
    for (const auto& words : std::vector<std::vector<std::string>>{
             {}, {"click", "1"}, {"click", "-1", "2"}, {"click", "1", "2", "3"}, {"move", "x", "1"},
             {"type"}, {"type", "a", "b"}, {"scroll", "1", "2", "sideways"}, {"scroll", "1", "2", "up", "many"},
             {"cursor", "now"}, {"jump"}}) {
        CAPTURE(words.size());
        auto refused = body(words);
        REQUIRE_FALSE(refused);
        CHECK(refused.error().code == "usage");
    }
    CHECK(body({"click", "1", "2"}, {"right", true, false}).error().code == "usage");  // a double right click
    CHECK(body({"click", "1", "2"}, {"left", true, true}).error().code == "usage");
    CHECK(body({"click", "1", "2"}, {"up", false, false}).error().code == "usage");
    CHECK(body({"move", "1", "2"}, {"right", false, false}).error().code == "usage");  // --button is click's
}

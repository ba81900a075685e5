// The host client against a hostile agent (docs/agent-protocol.md,
// "Host-side expectations"): a fake agent on a socket pair answers the
// hello and then whatever a test scripts — wrong-typed and missing fields,
// huge sizes, frames out of place, silence. Every case must end in an
// Error, never an exception or a hang.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <poll.h>
#include <thread>

#include "guest-agent/client/agent_client.hpp"
#include "guest-agent/desktop/desktop_client.hpp"
#include "guest-agent/exec/exec_client.hpp"
#include "guest-agent/files/files_client.hpp"
#include "guest-agent/identity/identity_client.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace std::chrono_literals;

namespace {

using Script = std::function<void(FrameStream&)>;

Json default_hello() { return Json{{"type", "hello"}, {"version", 1}, {"agent", "fake"}, {"boot_id", "b"}}; }

// The agent's end of a socket pair, running `script` after the hello. It
// ends when the script returns (closing its end) or, for a script that
// waits for the client, when the client closes.
struct FakeAgent {
    UniqueFd client_end;
    std::thread thread;

    explicit FakeAgent(Script script, Json hello = default_hello()) {
        int fds[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
        client_end = UniqueFd(fds[0]);
        thread = std::thread([fd = UniqueFd(fds[1]), script = std::move(script), hello = std::move(hello)]() mutable {
            FrameStream s(std::move(fd));
            if (!s.read_message() || !s.write_message(hello)) {
                return;
            }
            script(s);
        });
    }
    ~FakeAgent() { thread.join(); }

    Result<AgentClient> connect(std::chrono::milliseconds reply_timeout = 5s) {
        return AgentClient::handshake(std::move(client_end), "token", 5s, reply_timeout);
    }
};

// Reads until the client closes or abandons the connection.
void until_closed(FrameStream& s) {
    while (s.read()) {
    }
}

void request_then(FrameStream& s, std::initializer_list<Json> replies) {
    REQUIRE(s.read_message());
    for (const Json& r : replies) {
        if (!s.write_message(r)) {
            return;
        }
    }
}

std::vector<std::uint8_t> bytes_of(std::string_view text) { return {text.begin(), text.end()}; }

template <typename T>
void check_error(const Result<T>& r, std::string_view mentions) {
    REQUIRE_FALSE(r.has_value());
    INFO(r.error().to_string());
    CHECK(r.error().to_string().find(mentions) != std::string::npos);
}

}  // namespace

TEST_CASE("an error reply with a code that is not a string is an Error, not an exception") {
    FakeAgent agent([](FrameStream& s) {
        request_then(s, {Json{{"type", "error"}, {"code", 5}, {"message", {1, 2}}}});
        request_then(s, {Json{{"type", "error"}, {"code", "not_found"}, {"message", "gone\n\x1b[2J"}}});
        request_then(s, {Json{{"type", "error"}, {"code", "Not A Code"}}});
        until_closed(s);
    });
    auto client = agent.connect();
    REQUIRE(client);
    auto health = client->health();
    REQUIRE_FALSE(health);
    CHECK(error_code(health.error()) == "malformed_error");
    auto st = files::stat(*client, "/x");
    REQUIRE_FALSE(st);
    CHECK(error_code(st.error()) == "not_found");
    CHECK(st.error().message.find('\x1b') == std::string::npos);  // made printable
    CHECK(st.error().message.find('\n') == std::string::npos);
    auto started = ExecSession::start(*client, ExecRequest{.argv = {"true"}});
    REQUIRE_FALSE(started);
    CHECK(error_code(started.error()) == "malformed_error");
}

TEST_CASE("a hello with a wrong version or wrong-typed fields is refused") {
    for (const Json& hello : {Json{{"type", "hello"}, {"version", "1"}}, Json{{"type", "hello"}, {"version", 7}},
                              Json{{"type", "hello"}}, Json{{"type", "hello"}, {"version", 1}, {"boot_id", 3}},
                              Json{{"type", "error"}, {"code", false}}}) {
        CAPTURE(hello.dump());
        FakeAgent agent([](FrameStream&) {}, hello);
        CHECK_FALSE(agent.connect());
    }
}

TEST_CASE("stat and list replies with missing, wrong-typed or out-of-range fields") {
    const Json good{{"type", "result"}, {"kind", "file"}, {"size", 1}, {"mode", 0644},
                    {"uid", 0},         {"gid", 0},       {"mtime", -5}};
    FakeAgent agent([&](FrameStream& s) {
        request_then(s, {good});
        Json huge_mode = good;
        huge_mode["mode"] = 1ULL << 40;
        request_then(s, {huge_mode});
        Json no_size = good;
        no_size.erase("size");
        request_then(s, {no_size});
        Json bad_kind = good;
        bad_kind["kind"] = "device";
        request_then(s, {bad_kind});
        Json negative_uid = good;
        negative_uid["uid"] = -1;
        request_then(s, {negative_uid});
        until_closed(s);
    });
    auto client = agent.connect();
    REQUIRE(client);
    auto ok = files::stat(*client, "/f");
    REQUIRE(ok);
    CHECK(ok->mtime == -5);
    check_error(files::stat(*client, "/f"), "\"mode\"");
    check_error(files::stat(*client, "/f"), "\"size\" is missing");
    check_error(files::stat(*client, "/f"), "\"kind\"");
    check_error(files::stat(*client, "/f"), "\"uid\"");
}

TEST_CASE("list: an entry name that is not one component, an empty batch, a wrong type") {
    const Json entry{{"name", "a"}, {"kind", "file"}, {"size", 1}, {"mode", 0644}, {"mtime", 0}};
    auto with_name = [&](Json name) {
        Json e = entry;
        e["name"] = std::move(name);
        return Json{{"type", "result"}, {"entries", Json::array({e})}};
    };
    for (const Json& reply : {with_name("../etc"), with_name("."), with_name(7),
                              Json{{"type", "entries"}, {"entries", Json::array()}},
                              Json{{"type", "result"}, {"entries", "a"}}, Json{{"type", "result"}}}) {
        CAPTURE(reply.dump());
        FakeAgent agent([&](FrameStream& s) {
            request_then(s, {reply});
            until_closed(s);
        });
        auto client = agent.connect();
        REQUIRE(client);
        CHECK_FALSE(files::list(*client, "/d"));
    }
}

TEST_CASE("exec: a bad pid, output on a wrong channel or at a wrong offset, a bad exit") {
    const Json started{{"type", "started"}, {"pid", 12}};
    const std::vector<std::uint8_t> out = bytes_of("out");
    const std::vector<Script> scripts = {
        [](FrameStream& s) { request_then(s, {Json{{"type", "started"}, {"pid", "12"}}}); },
        [](FrameStream& s) { request_then(s, {Json{{"type", "started"}, {"pid", -3}}}); },
        [&](FrameStream& s) {
            request_then(s, {started});
            (void)s.write_data(Channel::Content, 0, out);
        },
        [&](FrameStream& s) {
            request_then(s, {started});
            (void)s.write_data(Channel::Stdout, 5, out);
        },
        [&](FrameStream& s) {
            request_then(s, {started});
            (void)s.write_eof(Channel::Stdout);
            (void)s.write_data(Channel::Stdout, 0, out);
        },
        [&](FrameStream& s) { request_then(s, {started, Json{{"type", "exit"}, {"code", "0"}}}); },
        [&](FrameStream& s) { request_then(s, {started, Json{{"type", "exit"}, {"signal", 100000}}}); },
        [&](FrameStream& s) { request_then(s, {started, Json{{"type", "exit"}, {"timed_out", 1}}}); },
        [&](FrameStream& s) { request_then(s, {started, Json{{"type", "started"}, {"pid", 1}}}); },
    };
    for (std::size_t i = 0; i < scripts.size(); ++i) {
        CAPTURE(i);
        FakeAgent agent([&, i](FrameStream& s) {
            scripts[i](s);
            until_closed(s);
        });
        auto client = agent.connect();
        REQUIRE(client);
        auto result = exec(*client, ExecRequest{.argv = {"x"}});
        REQUIRE_FALSE(result);
        CHECK(client->abandoned());
    }
}

TEST_CASE("detached exec, attach, proc_list and proc_signal check what they read") {
    FakeAgent agent([](FrameStream& s) {
        request_then(s, {Json{{"type", "result"}, {"id", "p1\n\x1b[31m"}, {"pid", 4}}});
        until_closed(s);
    });
    auto client = agent.connect();
    REQUIRE(client);
    check_error(exec_detached(*client, ExecRequest{.argv = {"x"}}), "process id");

    FakeAgent attach_agent([](FrameStream& s) {
        request_then(s, {Json{{"type", "attached"}, {"offset", 0}, {"end_offset", 3}, {"running", false}}});
        (void)s.write_data(Channel::Stdout, 0, bytes_of("abc"));
        (void)s.write_message(Json{{"type", "result"}, {"end_offset", 99}, {"running", false}, {"code", 0}});
        until_closed(s);
    });
    auto attach_client = attach_agent.connect();
    REQUIRE(attach_client);
    check_error(attach(*attach_client, "p1", 0, false, {}), "end_offset 99");

    FakeAgent list_agent([](FrameStream& s) {
        REQUIRE(s.read_message());
        Json batch = Json::array();
        for (int i = 0; i < 1000; ++i) {
            batch.push_back(Json{{"id", "p"}});
        }
        for (int i = 0; i < 5; ++i) {
            if (!s.write_message(Json{{"type", "processes"}, {"processes", batch}})) {
                return;
            }
        }
        until_closed(s);
    });
    auto list_client = list_agent.connect();
    REQUIRE(list_client);
    check_error(proc_list(*list_client), "over 4096 processes");

    FakeAgent signal_agent([](FrameStream& s) {
        request_then(s, {Json{{"type", "result"}, {"running", "yes"}}});
        until_closed(s);
    });
    auto signal_client = signal_agent.connect();
    REQUIRE(signal_client);
    check_error(proc_signal(*signal_client, "p1", 15), "\"running\"");
}

TEST_CASE("identity replies of the wrong shape are Errors") {
    CHECK_FALSE(parse_identity_reply(Json::array()));
    CHECK_FALSE(parse_identity_reply(Json{{"type", 5}}));
    CHECK_FALSE(parse_identity_reply(Json{{"type", "result"}, {"generation", "1"}}));
    CHECK_FALSE(parse_identity_reply(Json{{"type", "result"}, {"generation", 1}, {"cid", 1ULL << 33}}));
    CHECK_FALSE(parse_identity_reply(Json{{"type", "result"}, {"generation", 1}, {"mac", "not a mac"}}));
    CHECK_FALSE(parse_identity_reply(Json{{"type", "result"}, {"generation", 1}, {"reseeded", "true"}}));
    auto good = parse_identity_reply(
        Json{{"type", "result"}, {"generation", 2}, {"cid", 3}, {"mac", "52:54:00:12:34:56"}, {"interface", "eth0"}});
    REQUIRE_MESSAGE(good, (good ? "" : good.error().to_string()));
    CHECK(good->generation == 2);
    CHECK(good->cid == 3U);
}

TEST_CASE(
    "identity with ipv4: an agent that does not confirm it, or reads back something else, is an Error") {
    IdentityRequest request;
    request.ipv4 =
        parse_ipv4_settings("10.231.0.6/30", "10.231.0.5", std::vector<std::string>{"10.231.0.5"}).value();
    const Json base{{"type", "result"}, {"generation", 0}, {"cid", 3}, {"interface", "eth0"}};
    auto answered = [&](Json reply) {
        FakeAgent agent([reply](FrameStream& s) {
            request_then(s, {reply});
            until_closed(s);
        });
        auto client = agent.connect();
        REQUIRE(client);
        return identity(*client, request);
    };
    // An older agent ignores the field.
    check_error(answered(base), "did not confirm the IPv4 settings");
    Json other = base;
    other["ipv4_configured"] = true;
    other["ipv4"] = {{"link_up", true},
                     {"addresses", {"10.231.0.2/30"}},
                     {"gateway", "10.231.0.1"},
                     {"dns", {"10.231.0.5"}}};
    check_error(answered(other), "the interface has the addresses [10.231.0.2/30], not [10.231.0.6/30]");
    other["token_replaced"] = true;
    request.token = "00112233445566778899aabbccddeeff";
    check_error(answered(other), "the new token is in effect");
    request.token.reset();
    Json hostile = base;
    hostile["ipv4_configured"] = true;
    hostile["ipv4"] = {{"link_up", true},
                       {"addresses", Json::array({Json::object()})},
                       {"gateway", nullptr},
                       {"dns", Json::array()}};
    check_error(answered(hostile), "malformed reply");
    Json good = other;
    good.erase("token_replaced");
    good["ipv4"]["addresses"] = {"10.231.0.6/30"};
    good["ipv4"]["gateway"] = "10.231.0.5";
    auto confirmed = answered(good);
    REQUIRE_MESSAGE(confirmed.has_value(), (confirmed ? "" : confirmed.error().to_string()));
    CHECK(confirmed->ipv4_configured);
}

TEST_CASE("a reply that never comes times out, and the connection is abandoned") {
    FakeAgent agent([](FrameStream& s) {
        REQUIRE(s.read_message());
        until_closed(s);  // never answers
    });
    auto client = agent.connect(200ms);
    REQUIRE(client);
    const auto start = Clock::now();
    auto health = client->health();
    const auto waited = Clock::now() - start;
    REQUIRE_FALSE(health);
    CHECK(is_timeout(health.error()));
    CHECK(waited >= 150ms);
    CHECK(waited < 5s);
    CHECK(client->abandoned());
    CHECK_FALSE(client->health());
}

TEST_CASE("a frame that stops half-way times out") {
    FakeAgent agent([](FrameStream& s) {
        REQUIRE(s.read_message());
        const std::uint8_t partial[] = {20, 0, 0, 0, 1, '{'};  // 20 bytes promised, 2 sent
        REQUIRE(::write(s.fd(), partial, sizeof partial) == static_cast<ssize_t>(sizeof partial));
        until_closed(s);
    });
    auto client = agent.connect(200ms);
    REQUIRE(client);
    auto health = client->health();
    REQUIRE_FALSE(health);
    CHECK(is_timeout(health.error()));
}

TEST_CASE("exec: a silent command outlives the reply timeout; one with a timeout does not hang") {
    FakeAgent slow([](FrameStream& s) {
        request_then(s, {Json{{"type", "started"}, {"pid", 7}}});
        std::this_thread::sleep_for(500ms);  // longer than the reply timeout: following, not waiting
        (void)s.write_data(Channel::Stdout, 0, bytes_of("late"));
        (void)s.write_eof(Channel::Stdout);
        (void)s.write_eof(Channel::Stderr);
        (void)s.write_message(Json{{"type", "exit"}, {"code", 3}, {"timed_out", false}});
        until_closed(s);
    });
    auto client = slow.connect(100ms);
    REQUIRE(client);
    auto result = exec(*client, ExecRequest{.argv = {"x"}});
    REQUIRE(result);
    CHECK(result->stdout_data == "late");
    CHECK(result->code == 3);
    CHECK_FALSE(client->abandoned());

    FakeAgent silent([](FrameStream& s) {
        request_then(s, {Json{{"type", "started"}, {"pid", 7}}});
        until_closed(s);
    });
    auto silent_client = silent.connect(200ms);
    REQUIRE(silent_client);
    const auto start = Clock::now();
    auto never = exec(*silent_client, ExecRequest{.argv = {"x"}, .timeout = 100ms});
    REQUIRE_FALSE(never);
    CHECK(is_timeout(never.error()));
    CHECK(Clock::now() - start < 5s);
}

TEST_CASE("a download over the cap is an error and leaves no file") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / fmt::format("sbx-hostile-{}", ::getpid());
    fs::create_directories(dir);
    const std::string local = (dir / "got").string();
    const std::vector<std::uint8_t> chunk(600, 'x');

    SUBCASE("sent beyond a size it claimed") {
        FakeAgent agent([&](FrameStream& s) {
            request_then(s, {Json{{"type", "started"}, {"size", 0}, {"mode", 0644}}});
            for (std::uint64_t offset = 0; offset < 100 * chunk.size(); offset += chunk.size()) {
                if (!s.write_data(Channel::Content, offset, chunk)) {
                    break;
                }
            }
            until_closed(s);
        });
        auto client = agent.connect();
        REQUIRE(client);
        check_error(files::read_file_to(*client, "/proc/x", local, {}, 1000), "over the 1000-byte cap");
        CHECK_FALSE(fs::exists(local));
        CHECK(fs::is_empty(dir));  // no temporary file either
    }
    SUBCASE("announced over the cap: refused before any data; an old file stays") {
        { std::ofstream(local) << "old"; }
        FakeAgent agent([&](FrameStream& s) {
            request_then(s, {Json{{"type", "started"}, {"size", 1ULL << 50}, {"mode", 0644}}});
            until_closed(s);
        });
        auto client = agent.connect();
        REQUIRE(client);
        check_error(files::read_file_to(*client, "/big", local, {}, 1000), "cap");
        std::ifstream in(local);
        std::string old;
        in >> old;
        CHECK(old == "old");
    }
    SUBCASE("the connection breaks mid-download") {
        FakeAgent agent([&](FrameStream& s) {
            request_then(s, {Json{{"type", "started"}, {"size", 1200}, {"mode", 0644}}});
            (void)s.write_data(Channel::Content, 0, chunk);
        });
        auto client = agent.connect();
        REQUIRE(client);
        CHECK_FALSE(files::read_file_to(*client, "/f", local));
        CHECK_FALSE(fs::exists(local));
    }
    SUBCASE("a tar download over the cap") {
        FakeAgent agent([&](FrameStream& s) {
            request_then(s, {Json{{"type", "started"}}});
            (void)s.write_data(Channel::Content, 0, chunk);
            (void)s.write_data(Channel::Content, chunk.size(), chunk);
            until_closed(s);
        });
        auto client = agent.connect();
        REQUIRE(client);
        std::uint64_t delivered = 0;
        auto tar = files::get_tar(
            *client, "/d",
            [&](std::span<const std::uint8_t> b) -> Result<void> {
                delivered += b.size();
                return ok();
            },
            1000);
        check_error(tar, "cap");
        CHECK(delivered <= 1000);
    }
    SUBCASE("a download within the cap") {
        FakeAgent agent([&](FrameStream& s) {
            request_then(s, {Json{{"type", "started"}, {"size", 600}, {"mode", 0644}}});
            (void)s.write_data(Channel::Content, 0, chunk);
            (void)s.write_eof(Channel::Content);
            (void)s.write_message(Json{{"type", "result"}, {"bytes", 600}});
            until_closed(s);
        });
        auto client = agent.connect();
        REQUIRE(client);
        auto got = files::read_file_to(*client, "/f", local, {}, 600);
        REQUIRE(got);
        CHECK(*got == 600);
        CHECK(fs::file_size(local) == 600);
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
}

TEST_CASE("an upload the agent stops reading times out") {
    FakeAgent agent([](FrameStream& s) {
        request_then(s, {Json{{"type", "ready"}}});
        // Reads nothing more until the client gives up.
        pollfd p{s.fd(), POLLRDHUP, 0};
        ::poll(&p, 1, 10000);
    });
    auto client = agent.connect(200ms);
    REQUIRE(client);
    const std::string big(32 << 20, 'y');
    auto written = files::write_file_text(*client, "/f", big);
    REQUIRE_FALSE(written);
    CHECK(is_timeout(written.error()));
    CHECK(client->abandoned());
}

namespace {

// A PNG's signature and IHDR start, as far as the desktop client reads it.
std::string png_header(std::uint32_t width, std::uint32_t height) {
    std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
    for (std::uint32_t v : {width, height}) {
        for (int shift = 24; shift >= 0; shift -= 8) {
            png += static_cast<char>((v >> shift) & 0xff);
        }
    }
    return png;
}

// A fake agent that answers the one request with `reply`.
Script one_reply(Json reply) {
    return [reply = std::move(reply)](FrameStream& s) {
        request_then(s, {reply});
        until_closed(s);
    };
}

Script image_reply(std::string png, Json result) {
    return [png = std::move(png), result = std::move(result)](FrameStream& s) {
        REQUIRE(s.read_message());
        const auto bytes = bytes_of(png);
        (void)s.write_data(Channel::Content, 0, bytes);
        (void)s.write_eof(Channel::Content);
        (void)s.write_message(result);
        until_closed(s);
    };
}

}  // namespace

TEST_CASE("desktop: a screenshot arrives as base64 with the PNG's size") {
    FakeAgent agent(image_reply(png_header(1280, 800),
                                Json{{"type", "result"}, {"width", 1280}, {"height", 800}, {"bytes", 24}}));
    auto client = agent.connect();
    REQUIRE(client);
    auto shot = desktop_action(*client, Json{{"action", "screenshot"}});
    REQUIRE_MESSAGE(shot, (shot ? "" : shot.error().to_string()));
    CHECK((*shot)["width"] == 1280);
    CHECK((*shot)["height"] == 800);
    CHECK((*shot)["png"].get<std::string>().size() == 32);  // base64 of 24 bytes
}

TEST_CASE("desktop: images that are no PNG, or not of the size the reply says, are errors") {
    SUBCASE("not a PNG") {
        FakeAgent agent(image_reply(std::string(24, 'x'),
                                    Json{{"type", "result"}, {"width", 1}, {"height", 1}, {"bytes", 24}}));
        auto client = agent.connect();
        REQUIRE(client);
        check_error(desktop_action(*client, Json{{"action", "screenshot"}}), "not a PNG");
    }
    SUBCASE("another size") {
        FakeAgent agent(image_reply(png_header(10, 10),
                                    Json{{"type", "result"}, {"width", 11}, {"height", 10}, {"bytes", 24}}));
        auto client = agent.connect();
        REQUIRE(client);
        check_error(desktop_image(*client, Json{{"action", "zoom"}, {"region", {0, 0, 11, 10}}}), "not a PNG");
    }
    SUBCASE("a size out of range") {
        FakeAgent agent(image_reply(png_header(10, 10),
                                    Json{{"type", "result"}, {"width", -1}, {"height", 10}, {"bytes", 24}}));
        auto client = agent.connect();
        REQUIRE(client);
        check_error(desktop_action(*client, Json{{"action", "screenshot"}}), "width");
        CHECK(client->abandoned());
    }
    SUBCASE("over the caller's cap") {
        FakeAgent agent(image_reply(png_header(10, 10) + std::string(100, 'x'),
                                    Json{{"type", "result"}, {"width", 10}, {"height", 10}, {"bytes", 124}}));
        auto client = agent.connect();
        REQUIRE(client);
        check_error(desktop_action(*client, Json{{"action", "screenshot"}}, 64), "cap");
    }
}

TEST_CASE("desktop: status and action replies are checked") {
    SUBCASE("a running desktop without its display") {
        FakeAgent agent(one_reply(Json{{"type", "result"}, {"running", true}, {"width", 5}, {"height", 5}}));
        auto client = agent.connect();
        REQUIRE(client);
        check_error(desktop_status(*client), "display");
    }
    SUBCASE("a wrong-typed port") {
        FakeAgent agent(one_reply(Json{{"type", "result"}, {"display", 1}, {"vnc_port", "5901"}, {"width", 5},
                                  {"height", 5}, {"started", true}}));
        auto client = agent.connect();
        REQUIRE(client);
        check_error(desktop_start(*client), "vnc_port");
    }
    SUBCASE("a start reply is read") {
        FakeAgent agent(one_reply(Json{{"type", "result"}, {"display", 1}, {"vnc_port", 5901}, {"width", 1280},
                                  {"height", 800}, {"started", true}}));
        auto client = agent.connect();
        REQUIRE(client);
        auto info = desktop_start(*client);
        REQUIRE(info);
        CHECK(info->running);
        CHECK(info->started);
        CHECK(info->vnc_port == 5901);
        CHECK(info->width == 1280);
    }
    SUBCASE("a cursor position that is not a number") {
        FakeAgent agent(one_reply(Json{{"type", "result"}, {"x", "1"}, {"y", 2}}));
        auto client = agent.connect();
        REQUIRE(client);
        check_error(desktop_action(*client, Json{{"action", "cursor_position"}}), "x");
    }
    SUBCASE("an action's stderr is made printable") {
        FakeAgent agent(one_reply(Json{{"type", "result"}, {"stderr", "bad\x1b[31mkey"}}));
        auto client = agent.connect();
        REQUIRE(client);
        auto r = desktop_action(*client, Json{{"action", "key"}, {"text", "a"}});
        REQUIRE(r);
        CHECK((*r)["stderr"] == "bad?[31mkey");
    }
}

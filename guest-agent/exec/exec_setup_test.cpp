// What exec sets up for a process, through the real agent and client:
// terminals, environment, working directory, users, programs that cannot
// run; and hostile requests.
#include <doctest/doctest.h>
#include <poll.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "guest-agent/exec/exec_test_util.hpp"
#include "guest-agent/exec/passwd.hpp"
#include "guest-agent/exec/spawn.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;
using namespace std::chrono_literals;

TEST_CASE("a pseudo-terminal: tty, its size, and resizes") {
    ExecHarness h;
    auto client = h.connect();
    auto tty = run_ok(client, ExecRequest{.argv = {"tty"}, .pty = PtySize{}});
    CHECK(tty.code == 0);
    CHECK(tty.stdout_data.starts_with("/dev/pts/"));
    CHECK(tty.stderr_data.empty());

    auto size = run_ok(
        client, ExecRequest{.shell = "stty size; echo $TERM; echo to-stderr >&2", .pty = PtySize{33, 101}});
    CHECK(size.stdout_data ==
          "33 101\r\nxterm-256color\r\nto-stderr\r\n");  // one stream, the terminal's newlines

    // A resize reaches the process as SIGWINCH with the new size.
    auto session = ExecSession::start(
        client, ExecRequest{.shell = "trap 'stty size' WINCH; echo ready; while :; do sleep 0.02; done",
                            .timeout = 20s,
                            .pty = PtySize{24, 80}});
    REQUIRE(session);
    std::string seen;
    bool resized = false;
    while (seen.find("50 132") == std::string::npos) {
        auto event = session->next();
        REQUIRE(event);
        REQUIRE(event->kind != ExecSession::Event::Exit);
        seen += as_text(event->data);
        if (!resized && seen.find("ready") != std::string::npos) {
            REQUIRE(session->resize(50, 132));
            resized = true;
        }
    }
    REQUIRE(session->signal(SIGKILL));
    while (true) {
        auto event = session->next();
        REQUIRE(event);
        if (event->kind == ExecSession::Event::Exit) {
            CHECK(event->exit.signal == SIGKILL);
            break;
        }
    }
}

TEST_CASE("stdin on a terminal ends with the EOF character") {
    ExecHarness h;
    auto client = h.connect();
    const auto file = (h.dir.path / "typed").string();
    // The terminal echoes what is typed to the output; the file has what cat read.
    auto r = run_ok(
        client,
        ExecRequest{
            .shell = "cat > " + file, .stdin_data = "typed\npartial", .timeout = 20s, .pty = PtySize{}});
    CHECK(r.code == 0);
    auto typed = read_file(file, 1000);
    REQUIRE(typed);
    CHECK(*typed == "typed\npartial");
}

TEST_CASE("environment: fixed variables, then the env file, then the request") {
    ExecHarness h;
    {
        std::ofstream env(h.dir.path / "env");
        env << "# a comment\nFROM_FILE=file value\nOVERRIDDEN=file\n\n  INDENTED=yes\nnot a "
               "variable\n=novalue\n";
    }
    auto client = h.connect();
    auto r = run_ok(
        client,
        ExecRequest{
            .shell =
                "echo \"$FROM_FILE|$OVERRIDDEN|$INDENTED|$REQ|$HOME|$USER|$LOGNAME|$PATH|${TERM-unset}\"",
            .env = {{"OVERRIDDEN", "request"}, {"REQ", "r=1"}}});
    CHECK(r.stdout_data ==
          "file "
          "value|request|yes|r=1|/root|root|root|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/"
          "bin|unset\n");
    // The program is looked up in the PATH the process gets.
    std::filesystem::create_directory(h.dir.path / "bin");
    {
        std::ofstream script(h.dir.path / "bin" / "my-tool");
        script << "#!/bin/sh\necho my tool $1\n";
    }
    std::filesystem::permissions(h.dir.path / "bin" / "my-tool", std::filesystem::perms::owner_all);
    auto tool = run_ok(
        client, ExecRequest{.argv = {"my-tool", "ran"}, .env = {{"PATH", (h.dir.path / "bin").string()}}});
    CHECK(tool.stdout_data == "my tool ran\n");
}

TEST_CASE("working directory: given, the home by default, relative to the home") {
    ExecHarness h;
    auto client = h.connect();
    CHECK(run_ok(client, ExecRequest{.argv = {"pwd"}, .cwd = h.dir.path.string()}).stdout_data ==
          h.dir.path.string() + "\n");
    CHECK(run_ok(client, ExecRequest{.argv = {"pwd"}}).stdout_data == "/root\n");
    std::filesystem::create_directories("/root/.sbx-exec-test-cwd");
    CHECK(run_ok(client, ExecRequest{.argv = {"pwd"}, .cwd = ".sbx-exec-test-cwd"}).stdout_data ==
          "/root/.sbx-exec-test-cwd\n");
    std::filesystem::remove("/root/.sbx-exec-test-cwd");

    auto missing = exec(client, ExecRequest{.argv = {"pwd"}, .cwd = "/no/such/dir"});
    REQUIRE_FALSE(missing);
    CHECK(error_code(missing.error()) == "not_found");
    CHECK(missing.error().message.find("/no/such/dir") != std::string::npos);
    auto file = exec(client, ExecRequest{.argv = {"pwd"}, .cwd = "/etc/passwd"});
    REQUIRE_FALSE(file);
    CHECK(error_code(file.error()) == "not_a_directory");
    CHECK(sh(client, "echo ok").stdout_data == "ok\n");
}

TEST_CASE("users: by name with passwd's home and shell, by uid, unknown") {
    ExecHarness h;
    auto client = h.connect();
    auto nobody =
        run_ok(client, ExecRequest{.shell = "id -u; id -g; echo $HOME $USER $SHELL; pwd", .user = "nobody"});
    CHECK(nobody.stdout_data == "65534\n65534\n/nonexistent nobody /usr/sbin/nologin\n/\n");
    auto numeric =
        run_ok(client, ExecRequest{.shell = "id -u; id -g; id -G; echo $HOME $USER", .user = "12345"});
    CHECK(numeric.stdout_data == "12345\n12345\n12345\n/ 12345\n");
    auto root = run_ok(client, ExecRequest{.argv = {"id", "-u"}, .user = "0"});
    CHECK(root.stdout_data == "0\n");

    auto unknown = exec(client, ExecRequest{.argv = {"true"}, .user = "no-such-user"});
    REQUIRE_FALSE(unknown);
    CHECK(error_code(unknown.error()) == "not_found");
    // A directory the user may not enter.
    std::filesystem::create_directory(h.dir.path / "private");
    std::filesystem::permissions(h.dir.path / "private", std::filesystem::perms::owner_all);
    auto denied = exec(
        client, ExecRequest{.argv = {"true"}, .cwd = (h.dir.path / "private").string(), .user = "nobody"});
    REQUIRE_FALSE(denied);
    CHECK(error_code(denied.error()) == "permission_denied");
}

TEST_CASE("the default user (sbx-agent --default-user) runs what names no user, on a terminal too") {
    ExecHarness h;
    AgentOptions options = h.agent->options();
    CHECK(options.default_user == "root");
    options.default_user = "nobody";
    options.token = std::string(kTestToken);  // the door took the harness's copy
    h.agent = std::make_unique<Agent>(std::move(options));
    auto client = h.connect();
    auto plain = run_ok(client, ExecRequest{.shell = "id -u; id -g; echo $HOME $USER; pwd"});
    CHECK(plain.stdout_data == "65534\n65534\n/nonexistent nobody\n/\n");
    auto tty = run_ok(client, ExecRequest{.shell = "id -u; echo $USER", .pty = PtySize{}});
    CHECK(tty.stdout_data == "65534\r\nnobody\r\n");
    // A request that names a user gets that one.
    CHECK(run_ok(client, ExecRequest{.argv = {"id", "-u"}, .user = "root"}).stdout_data == "0\n");
    CHECK(run_ok(client, ExecRequest{.argv = {"id", "-u"}, .user = "0"}).stdout_data == "0\n");

    // A default user that is not in /etc/passwd fails each exec that relies on it.
    ExecHarness missing;
    options = missing.agent->options();
    options.default_user = "no-such-user-here";
    options.token = std::string(kTestToken);
    missing.agent = std::make_unique<Agent>(std::move(options));
    auto other = missing.connect();
    auto failed = exec(other, ExecRequest{.argv = {"true"}});
    REQUIRE_FALSE(failed);
    CHECK(error_code(failed.error()) == "not_found");
    CHECK(run_ok(other, ExecRequest{.argv = {"id", "-u"}, .user = "root"}).stdout_data == "0\n");
}

TEST_CASE("a program that cannot run exits 127 or 126 with a message, like a shell") {
    ExecHarness h;
    auto client = h.connect();
    auto missing = run_ok(client, ExecRequest{.argv = {"no-such-program-xyz"}});
    CHECK(missing.code == 127);
    CHECK(missing.stderr_data == "sbx-agent: no-such-program-xyz: command not found\n");
    auto absent = run_ok(client, ExecRequest{.argv = {"/no/such/program"}});
    CHECK(absent.code == 127);
    { std::ofstream(h.dir.path / "not-executable") << "echo hi\n"; }
    auto denied = run_ok(client, ExecRequest{.argv = {(h.dir.path / "not-executable").string()}});
    CHECK(denied.code == 126);
    CHECK(denied.stderr_data.find("cannot execute") != std::string::npos);
    CHECK(run_ok(client, ExecRequest{.argv = {"/etc"}}).code == 126);
    // Such a child ends the moment its starter resumes, often before it is
    // registered with the reaper: its status must still arrive, every time.
    for (int i = 0; i < 100; ++i) {
        REQUIRE(run_ok(client, ExecRequest{.argv = {"/no/such/program"}}).code == 127);
        auto failed = exec(client, ExecRequest{.argv = {"true"}, .cwd = "/no/such/dir"});
        REQUIRE_FALSE(failed);
    }
}

TEST_CASE("bad requests get the right error and the session goes on") {
    ExecHarness h;
    auto client = h.connect();
    auto expect_code = [&](Json fields, std::string_view code) {
        auto reply = client.call("exec", std::move(fields));
        REQUIRE_FALSE(reply);
        CHECK_MESSAGE(error_code(reply.error()) == code, reply.error().to_string());
    };
    expect_code(Json{{"argv", "true"}}, "bad_request");
    expect_code(Json{{"argv", Json::array()}}, "bad_request");
    expect_code(Json{{"argv", {"echo", 1}}}, "bad_request");
    expect_code(Json{{"argv", {""}}}, "bad_request");
    expect_code(Json{{"argv", {std::string("a\0b", 3)}}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"shell", "true"}}, "bad_request");
    expect_code(Json::object(), "bad_request");
    expect_code(Json{{"shell", 5}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"timeout_ms", -1}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"timeout_ms", "10"}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"timeout_ms", 1e300}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"timeout_ms", INT64_MAX}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"env", {{"A", 1}}}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"env", {"A=1"}}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"env", {{"A=B", "1"}}}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"env", {{"", "1"}}}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"pty", true}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"pty", {{"rows", -1}, {"cols", 80}}}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"pty", {{"rows", 24}, {"cols", 70000}}}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"stdin", "yes"}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"user", 0}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"user", ""}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"cwd", 7}}, "bad_request");
    expect_code(Json{{"argv", {"true"}}, {"detach", true}, {"stdin", true}, {"pty", Json::object()}}, "bad_request");
    // Errors quoting a request as large as a message still fit in one.
    const std::string huge(60000, 'x');
    expect_code(Json{{"argv", {"true"}}, {"user", huge}}, "not_found");
    expect_code(Json{{"argv", {"true"}}, {"cwd", "/" + huge}}, "io_error");  // ENAMETOOLONG
    expect_code(Json{{"argv", {"true"}}, {"env", {{huge, 1}}}}, "bad_request");
    CHECK(sh(client, "echo fine").stdout_data == "fine\n");
}

TEST_CASE("hostile input during an exec") {
    ExecHarness h;
    auto client = h.connect();
    auto session = ExecSession::start(client, ExecRequest{.argv = {"cat"}, .stdin_open = true});
    REQUIRE(session);
    FrameStream& stream = client.stream();
    // Unknown messages, bad signals and resizes without a terminal are ignored.
    REQUIRE(stream.write_message(Json{{"type", "request"}, {"op", "health"}}));
    REQUIRE(stream.write_message(Json{{"type", "signal"}, {"signal", 999}}));
    REQUIRE(stream.write_message(Json{{"type", "signal"}, {"signal", "KILL"}}));
    REQUIRE(stream.write_message(Json{{"type", "resize"}, {"rows", 1}, {"cols", 1}}));
    const std::uint8_t on_stdout[] = {'n', 'o'};
    REQUIRE(stream.write_data(Channel::Stdout, 0, on_stdout));  // not stdin: dropped
    REQUIRE(session->write_stdin(
        std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>("hi\n"), 3)));
    REQUIRE(session->close_stdin());
    std::string out;
    while (true) {
        auto event = session->next();
        REQUIRE(event);
        if (event->kind == ExecSession::Event::Output) {
            out += as_text(event->data);
        }
        if (event->kind == ExecSession::Event::Exit) {
            CHECK(event->exit.code == 0);
            break;
        }
    }
    CHECK(out == "hi\n");
    // Stdin after the exit, and a signal that crosses it, are dropped silently.
    REQUIRE(session->write_stdin(std::span<const std::uint8_t>(on_stdout)));
    REQUIRE(session->signal(SIGTERM));
    REQUIRE(session->resize(10, 10));
    CHECK(sh(client, "echo next").stdout_data == "next\n");

    // A frame that breaks framing in the middle of an exec: the process is
    // killed and the session ends.
    auto second = h.connect();
    auto victim = ExecSession::start(second, ExecRequest{.argv = {"sleep", "1000"}, .stdin_open = true});
    REQUIRE(victim);
    const std::uint8_t garbage[] = {0, 0, 0, 0, 9};
    REQUIRE(::write(second.stream().fd(), garbage, sizeof garbage) == sizeof garbage);
    CHECK(eventually([&] { return process_gone(victim->pid()); }));
}

TEST_CASE("a program gets the oom_score_adj its plan names, not the agent's") {
    auto user = lookup_user(std::to_string(::geteuid()));
    REQUIRE(user);
    // Raising the value needs no privilege (proc(5)); the test's own stays.
    const std::string own = [] {
        std::ifstream in("/proc/self/oom_score_adj");
        std::string v;
        in >> v;
        return v;
    }();
    for (std::optional<int> adj : {std::optional<int>(), std::optional<int>(987)}) {
        SpawnPlan plan;
        plan.argv = {"/bin/cat", "/proc/self/oom_score_adj"};
        plan.cwd = "/";
        plan.user = *user;
        plan.oom_score_adj = adj;
        auto process = spawn(plan);
        REQUIRE(process);
        std::string out;
        pollfd p{process->out.get(), POLLIN, 0};
        char buf[64];
        while (::poll(&p, 1, 10'000) == 1) {
            const ssize_t n = ::read(process->out.get(), buf, sizeof buf);
            if (n <= 0) {
                break;
            }
            out.append(buf, static_cast<std::size_t>(n));
        }
        CHECK(out == (adj ? "987" : own) + "\n");
    }
}

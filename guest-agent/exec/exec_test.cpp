// Attached exec through the real agent and client: exit codes, output
// streamed as produced, stdin, timeouts, signals, terminals, environment,
// users, concurrency, clients that vanish, and hostile requests.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>

#include "guest-agent/exec/exec_test_util.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;
using namespace std::chrono_literals;

TEST_CASE("exit codes of true, false and exit N") {
    ExecHarness h;
    auto client = h.connect();
    auto t = run_ok(client, ExecRequest{.argv = {"true"}});
    CHECK(t.code == 0);
    CHECK_FALSE(t.signal);
    CHECK_FALSE(t.timed_out);
    CHECK(t.pid > 0);
    CHECK(run_ok(client, ExecRequest{.argv = {"false"}}).code == 1);
    CHECK(sh(client, "exit 42").code == 42);
    CHECK(sh(client, "kill -SEGV $$").signal == SIGSEGV);
}

TEST_CASE("stdout and stderr are separate streams, each in order with contiguous offsets") {
    ExecHarness h;
    auto client = h.connect();
    std::uint64_t next[3] = {};
    bool contiguous = true;
    std::string out, err;
    ExecRequest request{.shell = "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done"};
    auto r = exec(client, request, [&](Channel channel, std::uint64_t offset, std::span<const std::uint8_t> bytes) {
        auto c = static_cast<int>(channel);
        contiguous &= offset == next[c];
        next[c] += bytes.size();
        (channel == Channel::Stdout ? out : err) += as_text(bytes);
    });
    REQUIRE(r);
    CHECK(r->code == 0);
    CHECK(contiguous);
    CHECK(out == "out1\nout2\nout3\nout4\nout5\n");
    CHECK(err == "err1\nerr2\nerr3\nerr4\nerr5\n");
    CHECK(r->stdout_data.empty());  // the sink took it
}

TEST_CASE("output arrives as it is produced, and a signal request reaches the process group") {
    ExecHarness h;
    auto client = h.connect();
    auto session = ExecSession::start(client, ExecRequest{.shell = "echo ready; sleep 30; echo never"});
    REQUIRE(session);
    const auto start = std::chrono::steady_clock::now();
    auto first = session->next();
    REQUIRE(first);
    CHECK(first->kind == ExecSession::Event::Output);
    CHECK(as_text(first->data) == "ready\n");
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    REQUIRE(session->signal(SIGTERM));
    std::string rest;
    while (true) {
        auto event = session->next();
        REQUIRE(event);
        if (event->kind == ExecSession::Event::Output) {
            rest += as_text(event->data);
        }
        if (event->kind == ExecSession::Event::Exit) {
            CHECK(event->exit.signal == SIGTERM);  // the shell, killed with its sleep
            CHECK_FALSE(event->exit.timed_out);
            break;
        }
    }
    CHECK(rest.empty());
    CHECK(sh(client, "echo again").stdout_data == "again\n");
}

TEST_CASE("50 MiB of output and back in through stdin, checked by hash") {
    ExecHarness h;
    auto producer = h.connect();
    auto hasher_client = h.connect();
    constexpr std::size_t kBytes = 50 << 20;
    auto hasher = ExecSession::start(hasher_client, ExecRequest{.argv = {"sha256sum"}, .stdin_open = true});
    REQUIRE(hasher);
    // The hasher's output is tiny: reading it after all input is written cannot deadlock.
    std::size_t received = 0;
    std::size_t frames = 0;
    std::string source_digest;
    bool sent_all = true;
    auto r = exec(producer,
                  ExecRequest{.shell = fmt::format("{{ head -c {} /dev/urandom | tee /dev/fd/3 | sha256sum >&2; }} 3>&1", kBytes)},
                  [&](Channel channel, std::uint64_t, std::span<const std::uint8_t> bytes) {
                      if (channel == Channel::Stdout) {
                          received += bytes.size();
                          ++frames;
                          CHECK(bytes.size() <= kMaxDataPayload);
                          sent_all &= hasher->write_stdin(bytes).has_value();
                      } else {
                          source_digest += as_text(bytes);
                      }
                  });
    REQUIRE(r);
    CHECK(r->code == 0);
    CHECK(received == kBytes);
    CHECK(sent_all);
    CHECK(frames > 1);
    REQUIRE(hasher->close_stdin());
    std::string digest;
    while (true) {
        auto event = hasher->next();
        REQUIRE(event);
        if (event->kind == ExecSession::Event::Output) {
            digest += as_text(event->data);
        } else if (event->kind == ExecSession::Event::Exit) {
            CHECK(event->exit.code == 0);
            break;
        }
    }
    CHECK(digest.substr(0, 64) == source_digest.substr(0, 64));
    CHECK(digest.size() > 64);
}

TEST_CASE("a client that reads slowly holds the process back; nothing piles up in the agent") {
    ExecHarness h;
    auto client = h.connect();
    constexpr std::size_t kBytes = 64 << 20;
    auto session = ExecSession::start(client, ExecRequest{.shell = fmt::format("head -c {} /dev/zero; echo done >&2", kBytes)});
    REQUIRE(session);
    std::this_thread::sleep_for(500ms);
    // Unread, the output fills the socket and the pipe, and the process waits.
    std::ifstream stat(fmt::format("/proc/{}/stat", session->pid()));
    std::string line;
    REQUIRE(std::getline(stat, line));
    CHECK(line[line.rfind(')') + 2] != 'Z');
    std::size_t out = 0;
    std::string err;
    while (true) {
        auto event = session->next();
        REQUIRE(event);
        if (event->kind == ExecSession::Event::Output) {
            if (event->channel == Channel::Stdout) {
                out += event->data.size();
            } else {
                err += as_text(event->data);
            }
        } else if (event->kind == ExecSession::Event::Exit) {
            CHECK(event->exit.code == 0);
            break;
        }
    }
    CHECK(out == kBytes);
    CHECK(err == "done\n");
}

TEST_CASE("the exit is not held up by a background process that keeps stdout open") {
    ExecHarness h;
    auto client = h.connect();
    const auto start = std::chrono::steady_clock::now();
    auto r = sh(client, "sleep 3 & echo started");
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    CHECK(r.code == 0);
    CHECK(r.stdout_data == "started\n");
}

TEST_CASE("stdin round trip through cat, with EOF") {
    ExecHarness h;
    auto client = h.connect();
    std::string input;
    for (int i = 0; i < 100000; ++i) {
        input += fmt::format("line {}\n", i);
    }
    auto r = run_ok(client, ExecRequest{.argv = {"cat"}, .stdin_data = input});
    CHECK(r.code == 0);
    CHECK(r.stdout_data == input);

    auto empty = run_ok(client, ExecRequest{.argv = {"cat"}, .stdin_data = std::string()});
    CHECK(empty.code == 0);
    CHECK(empty.stdout_data.empty());

    // A process that stops reading early: the rest of stdin is dropped.
    auto head = run_ok(client, ExecRequest{.shell = "head -c 5", .stdin_data = std::string(4 << 20, 'x')});
    CHECK(head.code == 0);
    CHECK(head.stdout_data == "xxxxx");

    // Without stdin the process reads /dev/null.
    CHECK(run_ok(client, ExecRequest{.argv = {"cat"}}).stdout_data.empty());
    CHECK(sh(client, "echo still serving").stdout_data == "still serving\n");
}

TEST_CASE("a timeout kills the process group and says so") {
    ExecHarness h;
    auto client = h.connect();
    const auto start = std::chrono::steady_clock::now();
    auto r = run_ok(client, ExecRequest{.shell = "sleep 30 & sleep 30; echo never", .timeout = 200ms});
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    CHECK(r.signal == SIGKILL);
    CHECK(r.timed_out);
    CHECK(r.stdout_data.empty());
    // A process that ends before its timeout did not time out.
    auto quick = run_ok(client, ExecRequest{.argv = {"true"}, .timeout = 10s});
    CHECK(quick.code == 0);
    CHECK_FALSE(quick.timed_out);
}

TEST_CASE("a pseudo-terminal: tty, its size, and resizes") {
    ExecHarness h;
    auto client = h.connect();
    auto tty = run_ok(client, ExecRequest{.argv = {"tty"}, .pty = PtySize{}});
    CHECK(tty.code == 0);
    CHECK(tty.stdout_data.starts_with("/dev/pts/"));
    CHECK(tty.stderr_data.empty());

    auto size = run_ok(client, ExecRequest{.shell = "stty size; echo $TERM; echo to-stderr >&2", .pty = PtySize{33, 101}});
    CHECK(size.stdout_data == "33 101\r\nxterm-256color\r\nto-stderr\r\n");  // one stream, the terminal's newlines

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
    auto r = run_ok(client, ExecRequest{.shell = "cat > " + file, .stdin_data = "typed\npartial", .timeout = 20s,
                                        .pty = PtySize{}});
    CHECK(r.code == 0);
    auto typed = read_file(file, 1000);
    REQUIRE(typed);
    CHECK(*typed == "typed\npartial");
}

TEST_CASE("environment: fixed variables, then the env file, then the request") {
    ExecHarness h;
    {
        std::ofstream env(h.dir.path / "env");
        env << "# a comment\nFROM_FILE=file value\nOVERRIDDEN=file\n\n  INDENTED=yes\nnot a variable\n=novalue\n";
    }
    auto client = h.connect();
    auto r = run_ok(client, ExecRequest{.shell = "echo \"$FROM_FILE|$OVERRIDDEN|$INDENTED|$REQ|$HOME|$USER|$LOGNAME|$PATH|${TERM-unset}\"",
                                        .env = {{"OVERRIDDEN", "request"}, {"REQ", "r=1"}}});
    CHECK(r.stdout_data ==
          "file value|request|yes|r=1|/root|root|root|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|unset\n");
    // The program is looked up in the PATH the process gets.
    std::filesystem::create_directory(h.dir.path / "bin");
    {
        std::ofstream script(h.dir.path / "bin" / "my-tool");
        script << "#!/bin/sh\necho my tool $1\n";
    }
    std::filesystem::permissions(h.dir.path / "bin" / "my-tool", std::filesystem::perms::owner_all);
    auto tool = run_ok(client, ExecRequest{.argv = {"my-tool", "ran"}, .env = {{"PATH", (h.dir.path / "bin").string()}}});
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
    auto nobody = run_ok(client, ExecRequest{.shell = "id -u; id -g; echo $HOME $USER $SHELL; pwd", .user = "nobody"});
    CHECK(nobody.stdout_data == "65534\n65534\n/nonexistent nobody /usr/sbin/nologin\n/\n");
    auto numeric = run_ok(client, ExecRequest{.shell = "id -u; id -g; id -G; echo $HOME $USER", .user = "12345"});
    CHECK(numeric.stdout_data == "12345\n12345\n12345\n/ 12345\n");
    auto root = run_ok(client, ExecRequest{.argv = {"id", "-u"}, .user = "0"});
    CHECK(root.stdout_data == "0\n");

    auto unknown = exec(client, ExecRequest{.argv = {"true"}, .user = "no-such-user"});
    REQUIRE_FALSE(unknown);
    CHECK(error_code(unknown.error()) == "not_found");
    // A directory the user may not enter.
    std::filesystem::create_directory(h.dir.path / "private");
    std::filesystem::permissions(h.dir.path / "private", std::filesystem::perms::owner_all);
    auto denied = exec(client, ExecRequest{.argv = {"true"}, .cwd = (h.dir.path / "private").string(), .user = "nobody"});
    REQUIRE_FALSE(denied);
    CHECK(error_code(denied.error()) == "permission_denied");
}

TEST_CASE("a program that cannot run exits 127 or 126 with a message, like a shell") {
    ExecHarness h;
    auto client = h.connect();
    auto missing = run_ok(client, ExecRequest{.argv = {"no-such-program-xyz"}});
    CHECK(missing.code == 127);
    CHECK(missing.stderr_data == "sbx-agent: no-such-program-xyz: command not found\n");
    auto absent = run_ok(client, ExecRequest{.argv = {"/no/such/program"}});
    CHECK(absent.code == 127);
    {
        std::ofstream(h.dir.path / "not-executable") << "echo hi\n";
    }
    auto denied = run_ok(client, ExecRequest{.argv = {(h.dir.path / "not-executable").string()}});
    CHECK(denied.code == 126);
    CHECK(denied.stderr_data.find("cannot execute") != std::string::npos);
    CHECK(run_ok(client, ExecRequest{.argv = {"/etc"}}).code == 126);
}

TEST_CASE("50 concurrent execs on 50 connections") {
    ExecHarness h;
    constexpr int kCount = 50;
    std::vector<AgentClient> clients;
    for (int i = 0; i < kCount; ++i) {
        clients.push_back(h.connect());
    }
    std::vector<std::string> outputs(kCount);
    std::vector<int> codes(kCount, -1);
    std::vector<std::thread> threads;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCount; ++i) {
        threads.emplace_back([&, i] {
            auto r = exec(clients[static_cast<std::size_t>(i)],
                          ExecRequest{.shell = fmt::format("sleep 0.5; echo {}; exit {}", i, i % 7)});
            if (r) {
                outputs[static_cast<std::size_t>(i)] = r->stdout_data;
                codes[static_cast<std::size_t>(i)] = *r->code;
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    for (int i = 0; i < kCount; ++i) {
        CHECK(outputs[static_cast<std::size_t>(i)] == fmt::format("{}\n", i));
        CHECK(codes[static_cast<std::size_t>(i)] == i % 7);
    }
    CHECK(elapsed < 20s);  // at once, not one after another (50 × 0.5 s = 25 s)
}

TEST_CASE("a client that disconnects kills its attached process group") {
    ExecHarness h;
    int pid = 0;
    int child_pid = 0;
    {
        auto client = h.connect();
        auto session = ExecSession::start(client, ExecRequest{.shell = "sleep 1000 & echo $!; wait"});
        REQUIRE(session);
        pid = session->pid();
        auto event = session->next();
        REQUIRE(event);
        child_pid = std::stoi(as_text(event->data));
        CHECK(::kill(pid, 0) == 0);
    }  // the connection closes here
    CHECK(eventually([&] { return process_gone(pid) && process_gone(child_pid); }));

    // Also when the client goes while the process blocks on a full socket.
    {
        auto client = h.connect();
        auto session = ExecSession::start(client, ExecRequest{.argv = {"yes"}});
        REQUIRE(session);
        pid = session->pid();
        std::this_thread::sleep_for(100ms);
    }
    CHECK(eventually([&] { return process_gone(pid); }));
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
    expect_code(Json{{"argv", {"true"}}, {"detach", true}, {"stdin", true}}, "bad_request");
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
    REQUIRE(session->write_stdin(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>("hi\n"), 3)));
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

TEST_CASE("children are reaped, orphaned grandchildren too") {
    ExecHarness h;
    auto client = h.connect();
    for (int i = 0; i < 20; ++i) {
        CHECK(sh(client, "(sleep 0.05 &); exit 0").code == 0);  // the sleep's parent exits at once
    }
    CHECK(eventually([] { return zombie_children() == 0; }));
}

TEST_CASE("exec round-trip latency of true") {
    ExecHarness h;
    auto client = h.connect();
    std::vector<double> micros;
    for (int i = 0; i < 200; ++i) {
        const auto start = std::chrono::steady_clock::now();
        auto r = run_ok(client, ExecRequest{.argv = {"true"}});
        micros.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
        REQUIRE(r.code == 0);
    }
    std::sort(micros.begin(), micros.end());
    MESSAGE(fmt::format("exec `true` round trip over a socketpair: median {:.0f} us, p99 {:.0f} us, max {:.0f} us",
                        micros[micros.size() / 2], micros[micros.size() * 99 / 100], micros.back()));
    CHECK(micros[micros.size() / 2] < 100000);
}

// Detached processes through the real agent and client: output logs read
// exactly once across reattaches, status, list, signal, remove, retention
// limits, offset_gone, and hostile requests.
#include <doctest/doctest.h>

#include "base/base64.hpp"
#include "guest-agent/exec/exec_test_util.hpp"
#include "guest-agent/exec/process_table.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;
using namespace std::chrono_literals;

namespace {

DetachedProcessRef start(AgentClient& client, ExecRequest request) {
    auto ref = exec_detached(client, request);
    REQUIRE_MESSAGE(ref.has_value(), (ref ? "" : ref.error().to_string()));
    CHECK(ref->id.size() > 1);
    CHECK(ref->pid > 0);
    return std::move(*ref);
}

// Follows to the end and returns everything from `offset`.
std::string follow_all(AgentClient& client, const std::string& id, std::uint64_t offset = 0,
                       AttachResult* out = nullptr) {
    std::string text;
    auto r =
        attach(client, id, offset, true, [&](Channel, std::uint64_t at, std::span<const std::uint8_t> bytes) {
            CHECK(at == offset + text.size());
            text += as_text(bytes);
        });
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().to_string()));
    CHECK_FALSE(r->running);
    CHECK(r->end_offset == offset + text.size());
    if (out != nullptr) {
        *out = *r;
    }
    return text;
}

Json status(AgentClient& client, const std::string& id) {
    auto s = proc_status(client, id);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().to_string()));
    return *s;
}

void wait_exited(AgentClient& client, const std::string& id) {
    REQUIRE(eventually([&] { return status(client, id)["running"] == false; }));
}

}  // namespace

TEST_CASE(
    "a detached process outlives its connection; reattaching from the last offset reads every byte once") {
    ExecHarness h;
    DetachedProcessRef ref;
    {
        auto starter = h.connect();
        ref = start(starter, ExecRequest{.shell = "i=0; while [ $i -lt 3000 ]; do echo $i; i=$((i+1)); [ "
                                                  "$((i % 50)) = 0 ] && sleep 0.01; done; exit 3"});
    }
    std::string expected;
    for (int i = 0; i < 3000; ++i) {
        expected += fmt::format("{}\n", i);
    }
    // Attach, take a few frames, hang up; again from where it stopped; until the exit.
    std::string got;
    int attaches = 0;
    bool exited = false;
    while (!exited) {
        REQUIRE(++attaches < 100000);
        auto client = h.connect();
        REQUIRE(client.send_request("proc_attach", Json{{"id", ref.id}, {"offset", got.size()}}));
        auto attached = client.read_reply();
        REQUIRE(attached);
        REQUIRE((*attached)["type"] == "attached");
        CHECK((*attached)["offset"] == got.size());
        for (int frames = 0; frames < 1 + attaches % 3;) {
            auto frame = client.stream().read();
            REQUIRE(frame);
            if (frame->kind == FrameKind::Data) {
                REQUIRE(frame->offset == got.size());
                CHECK(frame->channel == Channel::Stdout);
                got += as_text(frame->data);
                ++frames;
                continue;
            }
            auto exit = parse_message(frame->json);
            REQUIRE(exit);
            // "result" when it had ended before this attach
            CHECK(((*exit)["type"] == "exit" || (*exit)["type"] == "result"));
            CHECK((*exit)["running"] == false);
            CHECK((*exit)["code"] == 3);
            CHECK((*exit)["end_offset"] == got.size());
            exited = true;
            break;
        }
    }  // each client hangs up in the middle of the stream
    CHECK(attaches > 2);
    CHECK(got == expected);
    auto client = h.connect();
    CHECK(follow_all(client, ref.id) == expected);  // still all there, from 0
}

TEST_CASE("attach without follow sends what is there; status has the tail, list has everyone") {
    ExecHarness h;
    auto client = h.connect();
    auto quiet = start(client, ExecRequest{.shell = "printf 'first\\n'; printf 'oops\\n' >&2; sleep 1000"});
    auto loud = start(
        client, ExecRequest{.argv = {"sh", "-c", "head -c 10000 /dev/zero | tr '\\0' a; echo; echo end"}});

    REQUIRE(eventually([&] { return status(client, quiet.id)["end_offset"] == 11; }));
    std::string seen;
    std::vector<Channel> channels;
    auto now = attach(client, quiet.id, 0, false,
                      [&](Channel c, std::uint64_t, std::span<const std::uint8_t> bytes) {
                          seen += as_text(bytes);
                          channels.push_back(c);
                      });
    REQUIRE(now);
    CHECK(now->running);
    CHECK(now->end_offset == 11);
    CHECK(seen == "first\noops\n");
    CHECK(channels == std::vector<Channel>{Channel::Stdout, Channel::Stderr});
    auto from_end = attach(client, quiet.id, 11, false, {});
    REQUIRE(from_end);
    CHECK(from_end->end_offset == 11);

    auto s = status(client, quiet.id);
    CHECK(s["id"] == quiet.id);
    CHECK(s["pid"] == quiet.pid);
    CHECK(s["running"] == true);
    CHECK_FALSE(s.contains("code"));
    CHECK(s["tail"] == "first\noops\n");
    CHECK(s["first_offset"] == 0);
    CHECK(s["shell"] == "printf 'first\\n'; printf 'oops\\n' >&2; sleep 1000");
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    CHECK(std::abs(s["started_at"].get<std::int64_t>() - now_ms) < 60000);

    wait_exited(client, loud.id);
    auto l = status(client, loud.id);
    CHECK(l["code"] == 0);
    CHECK(l["end_offset"] == 10005);
    const std::string tail = l["tail"];
    CHECK(tail.size() == 4096);
    CHECK(tail == std::string(4091, 'a') + "\nend\n");
    CHECK(l["argv"] == Json{"sh", "-c", "head -c 10000 /dev/zero | tr '\\0' a; echo; echo end"});
    // Following a process that has already ended: its output, then a result.
    REQUIRE(client.send_request("proc_attach", Json{{"id", loud.id}, {"offset", 10000}}));
    auto attached = client.read_reply();
    REQUIRE(attached);
    CHECK((*attached)["running"] == false);
    CHECK((*attached)["end_offset"] == 10005);
    auto rest = client.stream().read();
    REQUIRE(rest);
    CHECK(as_text(rest->data) == "\nend\n");
    auto final_message = client.read_reply();
    REQUIRE(final_message);
    CHECK((*final_message)["type"] == "result");
    CHECK((*final_message)["code"] == 0);
    CHECK((*final_message)["end_offset"] == 10005);

    auto list = proc_list(client);
    REQUIRE(list);
    std::map<std::string, Json> by_id;
    for (const auto& p : (*list)["processes"]) {
        by_id[p["id"]] = p;
    }
    REQUIRE(by_id.size() == 2);
    CHECK(by_id[quiet.id]["running"] == true);
    CHECK(by_id[quiet.id]["pid"] == quiet.pid);
    CHECK(by_id[loud.id]["running"] == false);
    CHECK(by_id[loud.id]["code"] == 0);
    CHECK(by_id[loud.id].contains("argv"));
}

TEST_CASE("proc_signal, proc_remove and a detached timeout") {
    ExecHarness h;
    auto client = h.connect();
    auto sleeper = start(client, ExecRequest{.argv = {"sleep", "1000"}});
    auto removed_too_early = proc_remove(client, sleeper.id);
    REQUIRE_FALSE(removed_too_early);
    CHECK(error_code(removed_too_early.error()) == "bad_request");

    auto sent = proc_signal(client, sleeper.id, SIGTERM);
    REQUIRE(sent);
    CHECK(*sent);
    AttachResult end;
    CHECK(follow_all(client, sleeper.id, 0, &end).empty());
    CHECK(end.exit.signal == SIGTERM);
    CHECK(process_gone(sleeper.pid));
    auto late = proc_signal(client, sleeper.id, SIGTERM);  // exited: nothing sent, no error
    REQUIRE(late);
    CHECK_FALSE(*late);

    REQUIRE(proc_remove(client, sleeper.id));
    auto gone = proc_status(client, sleeper.id);
    REQUIRE_FALSE(gone);
    CHECK(error_code(gone.error()) == "not_found");
    auto again = proc_remove(client, sleeper.id);
    REQUIRE_FALSE(again);
    CHECK(error_code(again.error()) == "not_found");

    auto timed = start(client, ExecRequest{.shell = "echo start; sleep 1000", .timeout = 200ms});
    CHECK(follow_all(client, timed.id, 0, &end) == "start\n");
    CHECK(end.exit.signal == SIGKILL);
    CHECK(end.exit.timed_out);

    auto on_tty = start(client, ExecRequest{.argv = {"tty"}, .pty = PtySize{}});
    CHECK(follow_all(client, on_tty.id).starts_with("/dev/pts/"));
}

TEST_CASE("proc_stdin feeds a detached process's stdin and never blocks on it") {
    ExecHarness h;
    auto client = h.connect();
    const auto bytes = [](const std::string& text) {
        return std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
    };
    auto cat = start(client, ExecRequest{.argv = {"cat"}, .stdin_open = true});
    auto wrote = proc_stdin(client, cat.id, bytes("hello\n"), false);
    REQUIRE(wrote);
    CHECK(wrote->written == 6);
    CHECK(wrote->open);
    wrote = proc_stdin(client, cat.id, bytes("bye\n"), true);  // then EOF: cat ends
    REQUIRE(wrote);
    CHECK(wrote->written == 4);
    CHECK_FALSE(wrote->open);
    AttachResult end;
    CHECK(follow_all(client, cat.id, 0, &end) == "hello\nbye\n");
    CHECK(end.exit.code == 0);
    wrote = proc_stdin(client, cat.id, bytes("late"), false);  // closed: nothing goes, no error
    REQUIRE(wrote);
    CHECK(wrote->written == 0);
    CHECK_FALSE(wrote->open);

    // A process that does not read: its pipe takes what fits, then nothing,
    // and every call returns at once.
    auto sleeper = start(client, ExecRequest{.argv = {"sleep", "1000"}, .stdin_open = true});
    const std::string big(1u << 20, 'x');
    wrote = proc_stdin(client, sleeper.id, bytes(big), false);
    REQUIRE(wrote);
    CHECK(wrote->written < big.size());
    CHECK(wrote->open);
    wrote = proc_stdin(client, sleeper.id, bytes(big), true);
    REQUIRE(wrote);
    CHECK(wrote->written == 0);
    CHECK(wrote->open);  // eof waits for everything to have gone
    REQUIRE(proc_signal(client, sleeper.id, SIGKILL));

    // A process that closed its stdin: the write finds EPIPE, and says closed.
    auto closer = start(client, ExecRequest{.shell = "exec 0<&-; sleep 1000", .stdin_open = true});
    REQUIRE(eventually([&] {
        auto w = proc_stdin(client, closer.id, bytes("x"), false);
        return w && !w->open;
    }));
    REQUIRE(proc_signal(client, closer.id, SIGKILL));

    // Without stdin, too much at once, an unknown id, and on a terminal.
    auto plain = start(client, ExecRequest{.argv = {"sleep", "1000"}});
    auto refused = proc_stdin(client, plain.id, bytes("x"), false);
    REQUIRE_FALSE(refused);
    CHECK(error_code(refused.error()) == "bad_request");
    // More than one request's data, sent raw.
    std::string long_data(kStdinChunk + 1, 'y');
    auto too_much = client.call("proc_stdin", Json{{"id", plain.id}, {"data", base64_encode(long_data)}});
    REQUIRE_FALSE(too_much);
    CHECK(error_code(too_much.error()) == "bad_request");
    refused = proc_stdin(client, "p0000000000000000", bytes("x"), false);
    REQUIRE_FALSE(refused);
    CHECK(error_code(refused.error()) == "not_found");
    REQUIRE(proc_signal(client, plain.id, SIGKILL));
    auto tty = exec_detached(client, ExecRequest{.argv = {"cat"}, .stdin_open = true, .pty = PtySize{}});
    REQUIRE_FALSE(tty);
    CHECK(error_code(tty.error()) == "bad_request");
    CHECK(client.health());  // the session went on through all of it
}

TEST_CASE("offsets older than the retained output are offset_gone, with the first retained offset") {
    ExecHarness h;
    constexpr std::size_t kLog = 64 * 1024;
    h.agent->processes().set_log_capacity(kLog);
    auto client = h.connect();
    auto big = start(client, ExecRequest{.shell = "head -c 1000000 /dev/zero"});
    wait_exited(client, big.id);
    auto s = status(client, big.id);
    CHECK(s["end_offset"] == 1000000);
    CHECK(s["first_offset"] == 1000000 - kLog);

    auto old = attach(client, big.id, 0, true, {});
    REQUIRE_FALSE(old);
    CHECK(error_code(old.error()) == "offset_gone");
    CHECK(first_offset_of(old.error()) == 1000000 - kLog);
    auto rest = follow_all(client, big.id, 1000000 - kLog);
    CHECK(rest == std::string(kLog, '\0'));

    auto beyond = attach(client, big.id, 1000001, true, {});
    REQUIRE_FALSE(beyond);
    CHECK(error_code(beyond.error()) == "bad_request");
    CHECK(client.health());
}

TEST_CASE("a follower that falls behind the log gets offset_gone, and the process never waits for it") {
    ExecHarness h;
    h.agent->processes().set_log_capacity(64 * 1024);
    auto follower = h.connect();
    auto watcher = h.connect();
    // The flood waits for `go`, made once the follower is attached at offset
    // 0: attaching after 64 KiB had gone by would be offset_gone already.
    const auto go = h.dir.path / "go";
    auto flood = start(watcher, ExecRequest{.shell = fmt::format("while [ ! -e '{}' ]; do sleep 0.01; done; "
                                                                 "head -c 50000000 /dev/zero; echo done",
                                                                 go.string())});
    REQUIRE(follower.send_request("proc_attach", Json{{"id", flood.id}}));
    auto attached = follower.read_reply();
    REQUIRE_MESSAGE(attached, (attached ? "" : attached.error().to_string()));
    CHECK((*attached)["offset"] == 0);
    std::ofstream{go};
    // The follower reads nothing while 50 MB go by; the process finishes anyway.
    wait_exited(watcher, flood.id);
    std::uint64_t next = (*attached)["offset"];
    while (true) {
        auto frame = follower.stream().read();
        REQUIRE(frame);
        if (frame->kind == FrameKind::Data) {
            CHECK(frame->offset == next);
            next += frame->data.size();
            continue;
        }
        auto message = parse_message(frame->json);
        REQUIRE(message);
        CHECK((*message)["type"] == "error");
        CHECK((*message)["code"] == "offset_gone");
        // Where the reader was overtaken depends on timing; that it was, not.
        CHECK((*message)["first_offset"] > next);
        CHECK((*message)["first_offset"] <= 50000005 - 64 * 1024);
        break;
    }
}

TEST_CASE("limits: 256 running detached processes, the newest 64 exited ones kept") {
    ExecHarness h;
    auto client = h.connect();
    std::vector<DetachedProcessRef> refs;
    for (std::size_t i = 0; i < ProcessTable::kMaxRunning; ++i) {
        refs.push_back(start(client, ExecRequest{.argv = {"sleep", "1000"}}));
    }
    auto over = exec_detached(client, ExecRequest{.argv = {"true"}});
    REQUIRE_FALSE(over);
    CHECK(error_code(over.error()) == "limit");
    // Attached execs are not detached processes: they still run.
    CHECK(run_ok(client, ExecRequest{.argv = {"true"}}).code == 0);

    for (const auto& ref : refs) {
        REQUIRE(proc_signal(client, ref.id, SIGKILL));
        wait_exited(client, ref.id);  // one by one: the order of their ends is known
    }
    auto list = proc_list(client);
    REQUIRE(list);
    REQUIRE((*list)["processes"].size() == ProcessTable::kMaxExited);
    std::set<std::string> kept;
    for (const auto& p : (*list)["processes"]) {
        kept.insert(p["id"]);
        CHECK(p["signal"] == SIGKILL);
    }
    for (std::size_t i = 0; i < refs.size(); ++i) {
        CHECK(kept.contains(refs[i].id) == (i >= refs.size() - ProcessTable::kMaxExited));
    }
    auto evicted = proc_status(client, refs.front().id);
    REQUIRE_FALSE(evicted);
    CHECK(error_code(evicted.error()) == "not_found");
    CHECK(exec_detached(client, ExecRequest{.argv = {"true"}}));  // room again
}

TEST_CASE("long command lines and many processes still fit in proc_status and proc_list replies") {
    ExecHarness h;
    auto client = h.connect();
    // Control characters are six bytes each once escaped: 48 KiB of request.
    const std::string junk(8000, '\x01');
    const std::string command =
        fmt::format(": '{}'; head -c 4096 /dev/zero | tr '\\0' '\\1'; sleep 1000", junk);
    std::vector<DetachedProcessRef> refs;
    for (int i = 0; i < 100; ++i) {
        refs.push_back(start(client, ExecRequest{.shell = command}));
    }
    REQUIRE(eventually([&] { return status(client, refs[0].id)["end_offset"] == 4096; }));
    auto s = status(client, refs[0].id);
    CHECK(s["command_truncated"] == true);
    CHECK(std::string(s["shell"]).starts_with(": '\x01\x01"));
    CHECK(std::string(s["tail"]) == std::string(4096, '\x01'));

    REQUIRE(client.send_request("proc_list"));
    int batches = 0;
    std::size_t listed = 0;
    while (true) {
        auto reply = client.read_reply();
        REQUIRE(reply);
        listed += (*reply)["processes"].size();
        if ((*reply)["type"] == "result") {
            break;
        }
        CHECK((*reply)["type"] == "processes");
        ++batches;
    }
    CHECK(batches > 0);
    CHECK(listed == refs.size());
    auto joined = proc_list(client);
    REQUIRE(joined);
    CHECK((*joined)["processes"].size() == refs.size());
}

TEST_CASE("bad proc_* requests get the right error and the session goes on") {
    ExecHarness h;
    auto client = h.connect();
    auto sleeper = start(client, ExecRequest{.argv = {"sleep", "1000"}});
    auto expect_code = [&](std::string_view op, Json fields, std::string_view code) {
        auto reply = client.call(op, std::move(fields));
        REQUIRE_FALSE(reply);
        CHECK_MESSAGE(error_code(reply.error()) == code, reply.error().to_string());
    };
    for (std::string_view op : {"proc_attach", "proc_status", "proc_signal", "proc_remove"}) {
        expect_code(op, Json::object(), "bad_request");
        expect_code(op, Json{{"id", 5}}, "bad_request");
    }
    expect_code("proc_attach", Json{{"id", "nope"}}, "not_found");
    expect_code("proc_status", Json{{"id", "nope"}}, "not_found");
    expect_code("proc_signal", Json{{"id", "nope"}, {"signal", 15}}, "not_found");
    expect_code("proc_remove", Json{{"id", "nope"}}, "not_found");
    expect_code("proc_status", Json{{"id", std::string(60000, 'x')}}, "not_found");
    expect_code("proc_attach", Json{{"id", sleeper.id}, {"offset", -1}}, "bad_request");
    expect_code("proc_attach", Json{{"id", sleeper.id}, {"offset", "0"}}, "bad_request");
    expect_code("proc_attach", Json{{"id", sleeper.id}, {"follow", 1}}, "bad_request");
    expect_code("proc_signal", Json{{"id", sleeper.id}, {"signal", 0}}, "bad_request");
    expect_code("proc_signal", Json{{"id", sleeper.id}, {"signal", 65}}, "bad_request");
    expect_code("proc_signal", Json{{"id", sleeper.id}, {"signal", "TERM"}}, "bad_request");
    expect_code("proc_signal", Json{{"id", sleeper.id}}, "bad_request");
    CHECK(status(client, sleeper.id)["running"] == true);
    CHECK(client.health());
}

TEST_CASE("detached processes and their pumps end with the agent") {
    int pid = 0;
    {
        ExecHarness h;
        auto client = h.connect();
        pid = start(client, ExecRequest{.shell = "while :; do echo spam; done"}).pid;
    }
    CHECK(eventually([&] { return process_gone(pid); }));
}

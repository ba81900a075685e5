// Commands in a sandbox: exec (attached, the whole result at once) and the
// detached ones for long jobs (exec_start, exec_status, exec_output from
// an offset, write_stdin, exec_signal), over docs/api.md "Exec, processes
// and files".
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "base/base64.hpp"
#include "host-tools/mcp/schema_check.hpp"
#include "host-tools/mcp/tools.hpp"

namespace sbx::mcp {

namespace {

constexpr std::size_t kDefaultOutput = 64 * 1024;
constexpr std::int64_t kDefaultTimeoutMs = 60'000;
constexpr std::size_t kStdinPiece = 512 * 1024;  // one POST …/stdin (its base64 under the API's 1 MiB body)
constexpr auto kStdinPatience = std::chrono::seconds(10);

// The command fields every exec tool takes (docs/api.md POST …/exec).
constexpr const char* kCommandFields = R"(
  "command":{"type":"array","items":{"type":"string"},"minItems":1,"description":"argv, looked up in PATH"},
  "shell":{"type":"string","minLength":1,"description":"A line for /bin/sh -c (instead of command)."},
  "cwd":{"type":"string","description":"Working directory (default the user's home)."},
  "env":{"type":"object","additionalProperties":{"type":"string"}},
  "user":{"type":"string","description":"User name or uid (default: the image's user: `user` in the default image, root in slim)."})";

std::string exec_input(const char* more) {
    return fmt::format(R"({{"type":"object","additionalProperties":false,"required":["sandbox"],"properties":{{
      "sandbox":{{"type":"string","minLength":1,"description":"The sandbox's id"}},{}{}}}}})",
                       kCommandFields, more);
}

// The API's exec body from the tool's arguments; exactly one of command and shell.
Result<Json> exec_body(const Json& args) {
    if (args.contains("command") == args.contains("shell")) {
        return make_coded_error("invalid_argument", "give exactly one of command (argv) and shell (a line)");
    }
    Json body = Json::object();
    for (const char* name : {"command", "shell", "cwd", "env", "user", "timeoutMs"}) {
        if (args.contains(name)) {
            body[name] = args[name];
        }
    }
    return body;
}

// Keeps the first and the last `cap / 2` bytes of a stream and counts the rest.
class OutputKeeper {
public:
    explicit OutputKeeper(std::size_t cap) : half_(cap / 2) {}
    void add(std::string_view bytes) {
        total_ += bytes.size();
        const std::size_t to_head = std::min(bytes.size(), half_ - std::min(half_, head_.size()));
        head_.append(bytes.substr(0, to_head));
        tail_.append(bytes.substr(to_head));
        if (tail_.size() > 2 * half_ + 4096) {
            tail_.erase(0, tail_.size() - half_);
        }
    }
    [[nodiscard]] std::uint64_t total() const { return total_; }
    [[nodiscard]] bool cut() const { return head_.size() + tail_.size() < total_ || tail_.size() > half_; }
    [[nodiscard]] std::string text() const {
        if (!cut()) {
            return to_utf8(head_ + tail_);
        }
        const std::string_view tail = std::string_view(tail_).substr(tail_.size() - std::min(tail_.size(), half_));
        return to_utf8(head_) + fmt::format("\n[… {} bytes left out …]\n", total_ - head_.size() - tail.size()) +
               to_utf8(tail);
    }

private:
    std::size_t half_;
    std::string head_, tail_;
    std::uint64_t total_ = 0;
};

// A streamed route's error status: its body is the API's error (docs/api.md "Errors").
Error error_answer(const std::string& body) {
    const Json e = Json::parse(body, nullptr, false);
    return make_coded_error(e.is_object() ? e.value("code", "bad_response") : "bad_response", "{}",
                            e.is_object() ? e.value("message", "") : body.substr(0, 200));
}

// Splits a streamed body into lines (NDJSON) or SSE events as it comes.
class LineSplitter {
public:
    // false from `line`: stop.
    bool feed(std::string_view bytes, const std::function<bool(std::string_view)>& line) {
        pending_.append(bytes);
        std::size_t start = 0;
        for (std::size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
            if (!line(std::string_view(pending_).substr(start, nl - start))) {
                return false;
            }
        }
        pending_.erase(0, start);
        return pending_.size() < (8u << 20);  // one NDJSON line of at most a few MiB
    }

private:
    std::string pending_;
};

Result<Json> run_exec(const Json& args, ToolContext& ctx) {
    auto body = exec_body(args);
    if (!body) {
        return body.error();
    }
    if (!body->contains("timeoutMs")) {
        (*body)["timeoutMs"] = kDefaultTimeoutMs;
    }
    if (args.contains("stdin")) {
        (*body)["stdin"] = base64_encode(args["stdin"].get<std::string>());
    }
    const std::size_t cap = args.value("maxOutputBytes", kDefaultOutput);
    OutputKeeper out(cap), err(cap);
    Json end;  // the exit or error line
    std::string bad;
    LineSplitter lines;
    std::string error_body;
    auto head = ctx.api.call(post(sandbox_path(args, "/exec"), *body), [&](std::string_view bytes) {
        if (error_body.size() < 65536 && end.is_null()) {
            error_body.append(bytes.substr(0, 65536));
        }
        return lines.feed(bytes, [&](std::string_view line) {
            const Json event = Json::parse(line, nullptr, false);
            const std::string type = event.is_object() ? event.value("type", "") : "";
            if (type == "stdout" || type == "stderr") {
                auto data = base64_decode(event.value("data", ""));
                if (!data) {
                    bad = "output that is not base64";
                    return false;
                }
                (type == "stdout" ? out : err).add(*data);
            } else if (type == "exit" || type == "error") {
                end = event;
            }
            return true;
        });
    });
    if (!head) {
        return head.error();
    }
    if (head->status < 200 || head->status >= 300) {
        return error_answer(error_body);
    }
    if (!bad.empty() || end.is_null()) {
        return make_coded_error("bad_response", "the exec stream ended without an exit{}", bad.empty() ? "" : ": " + bad);
    }
    if (end.value("type", "") == "error") {
        return make_coded_error(end.value("code", "agent_unavailable"), "{}", end.value("message", ""));
    }
    return Json{{"exitCode", member(end, "exitCode")},
                {"signal", member(end, "signal")},
                {"timedOut", end.value("timedOut", false)},
                {"stdout", out.text()},
                {"stderr", err.text()},
                {"stdoutBytes", out.total()},
                {"stderrBytes", err.total()},
                {"truncated", out.cut() || err.cut()}};
}

Result<Json> start(const Json& args, ToolContext& ctx) {
    auto body = exec_body(args);
    if (!body) {
        return body.error();
    }
    (*body)["detach"] = true;
    if (args.value("openStdin", false)) {
        (*body)["stdinOpen"] = true;
    }
    auto answer = call_json(ctx.api, post(sandbox_path(args, "/exec"), *body));
    if (!answer) {
        return answer.error();
    }
    return Json{{"process", member(member(*answer, "process"), "id")}, {"pid", member(member(*answer, "process"), "pid")}};
}

std::string process_path(const Json& args, std::string_view rest = "") {
    return sandbox_path(args, "/processes/" + url_encode(args.at("process").get<std::string>()) + std::string(rest));
}

Result<Json> status(const Json& args, ToolContext& ctx) {
    auto answer = call_json(ctx.api, get(process_path(args)));
    if (!answer) {
        return answer.error();
    }
    Json process = member(*answer, "process");
    if (!process.is_object()) {
        return make_coded_error("bad_response", "no process in sbxd's answer");
    }
    auto tail = base64_decode(process.value("tail", ""));
    process["tail"] = tail ? to_utf8(*tail) : std::string();
    return process;
}

// POST …/stdin until all of it went (the pipe takes what the process has
// read room for), for at most kStdinPatience; what went and whether it is open.
Result<Json> write_stdin(const Json& args, ToolContext& ctx) {
    if (args.contains("text") && args.contains("base64")) {
        return make_coded_error("invalid_argument", "give text or base64, not both");
    }
    std::string bytes = args.value("text", "");
    if (args.contains("base64")) {
        auto decoded = base64_decode(args["base64"].get<std::string>());
        if (!decoded) {
            return make_coded_error("invalid_argument", "base64: {}", decoded.error().message);
        }
        bytes = std::move(*decoded);
    }
    const bool eof = args.value("eof", false);
    const auto deadline = std::chrono::steady_clock::now() + kStdinPatience;
    std::size_t sent = 0;
    bool open = true;
    do {
        const std::string_view rest = std::string_view(bytes).substr(sent, kStdinPiece);
        const bool last = sent + rest.size() == bytes.size();
        auto answer = call_json(ctx.api, post(process_path(args, "/stdin"),
                                              Json{{"data", base64_encode(rest)}, {"eof", eof && last}}));
        if (!answer) {
            return answer.error();
        }
        const std::size_t written = answer->value("written", std::size_t{0});
        sent += std::min(written, rest.size());
        open = answer->value("open", false);
        if (written < rest.size() && open) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the process reads at its pace
        }
    } while (open && sent < bytes.size() && std::chrono::steady_clock::now() < deadline);
    return Json{{"written", sent}, {"open", open}, {"complete", sent == bytes.size()}};
}

// GET …/output?offset=N&follow=false: the output there now as server-sent
// events, ending with `exit` or `running` (docs/api.md).
Result<Json> output(const Json& args, ToolContext& ctx) {
    const std::uint64_t offset = args.value("offset", std::uint64_t{0});
    const std::size_t cap = args.value("maxBytes", kDefaultOutput);
    std::string bytes;
    std::uint64_t next = offset;
    bool more = false;
    Json end;
    std::string event, data, bad, error_body;
    std::uint64_t id = 0;
    LineSplitter lines;
    auto head = ctx.api.call(
        get(process_path(args, fmt::format("/output?offset={}&follow=false", offset))), [&](std::string_view chunk) {
            if (error_body.size() < 65536) {
                error_body.append(chunk.substr(0, 65536));
            }
            return lines.feed(chunk, [&](std::string_view line) {
                if (line.starts_with("id: ")) {
                    id = std::strtoull(std::string(line.substr(4)).c_str(), nullptr, 10);
                } else if (line.starts_with("event: ")) {
                    event = line.substr(7);
                } else if (line.starts_with("data: ")) {
                    data = line.substr(6);
                } else if (line.empty() && !event.empty()) {  // HTML §9.2.6: a blank line dispatches
                    if (event == "output") {
                        auto decoded = base64_decode(data);
                        if (!decoded || id < decoded->size()) {
                            bad = "an output event that is not base64 at its offset";
                            return false;
                        }
                        const std::uint64_t at = id - decoded->size();
                        const std::size_t room = cap - bytes.size();
                        bytes.append(decoded->substr(0, room));
                        next = at + std::min(room, decoded->size());
                        if (decoded->size() > room) {
                            more = true;
                            return false;
                        }
                    } else {
                        end = Json::parse(data, nullptr, false);
                        end["event"] = event;
                    }
                    event.clear();
                    data.clear();
                }
                return true;
            });
        });
    if (!head) {
        return head.error();
    }
    if (head->status < 200 || head->status >= 300) {
        return error_answer(error_body);
    }
    if (!bad.empty()) {
        return make_coded_error("bad_response", "{}", bad);
    }
    if (end.is_object() && end.value("event", "") == "error") {
        return make_coded_error(end.value("code", "agent_unavailable"), "{}", end.value("message", ""));
    }
    Json result = {{"output", to_utf8(bytes)}, {"offset", offset}, {"nextOffset", next}, {"more", more}};
    if (more || !end.is_object()) {  // stopped early: ask how it stands
        auto now = status(args, ctx);
        if (!now) {
            return now.error();
        }
        end = {{"event", now->value("running", false) ? "running" : "exit"},
               {"exitCode", member(*now, "exitCode")},
               {"signal", member(*now, "signal")}};
    }
    result["running"] = end.value("event", "") == "running";
    result["exitCode"] = member(end, "exitCode");
    result["signal"] = member(end, "signal");
    return result;
}

}  // namespace

void add_exec_tools(std::vector<ToolSpec>& tools) {
    tools.push_back(ToolSpec{
        "exec", "Run a command",
        "Runs a command in the sandbox and returns its exit code, stdout and stderr when it ends (killed after "
        "timeoutMs, default 60 s). Long output keeps its start and end. For jobs that run longer, or servers, use "
        "exec_start.",
        schema(exec_input(R"(,
          "timeoutMs":{"type":"integer","minimum":0,"maximum":86400000,"description":"Kill it after this long (default 60000; 0: never)."},
          "stdin":{"type":"string","description":"Text given as its standard input"},
          "maxOutputBytes":{"type":"integer","minimum":1024,"maximum":5242880,"description":"Kept of each of stdout and stderr (default 65536)."})")
                   .c_str()),
        schema(R"({"type":"object","required":["exitCode","stdout","stderr"],"properties":{
          "exitCode":{"type":["integer","null"]},"signal":{"type":["integer","null"]},"timedOut":{"type":"boolean"},
          "stdout":{"type":"string"},"stderr":{"type":"string"},"stdoutBytes":{"type":"integer"},
          "stderrBytes":{"type":"integer"},"truncated":{"type":"boolean"}}})"),
        hints(false, true, false), run_exec});
    tools.push_back(ToolSpec{
        "exec_start", "Start a long-running command",
        "Starts a command that runs on its own (a build, a server, a training run) and returns its process id at "
        "once. Its output is kept (the last 16 MiB): read it with exec_output, check it with exec_status.",
        schema(exec_input(R"(,
          "timeoutMs":{"type":"integer","minimum":0,"maximum":1000000000000,"description":"Kill it after this long (default: never)."},
          "openStdin":{"type":"boolean","description":"Keep its standard input open for write_stdin (default: none)."})")
                   .c_str()),
        schema(R"({"type":"object","required":["process"],"properties":{"process":{"type":"string"},"pid":{"type":"integer"}}})"),
        hints(false, true, false), start});
    const char* const kProcessInput = R"({"type":"object","additionalProperties":false,"required":["sandbox","process"],
      "properties":{"sandbox":{"type":"string","minLength":1},"process":{"type":"string","minLength":1,"description":"From exec_start"}}})";
    tools.push_back(ToolSpec{
        "exec_status", "Check a started command", "Whether it still runs, its exit code, and its last output.",
        schema(kProcessInput),
        schema(R"({"type":"object","required":["running"],"properties":{"running":{"type":"boolean"},
          "exitCode":{"type":["integer","null"]},"signal":{"type":["integer","null"]},"outputBytes":{"type":"integer"},
          "tail":{"type":"string"}}})"),
        hints(true, false, true), status});
    tools.push_back(ToolSpec{
        "exec_output", "Read a started command's output",
        "Its output (stdout and stderr as written) from a byte offset: what is there now, without waiting. Call "
        "again with nextOffset to go on; nothing is lost or repeated.",
        schema(R"({"type":"object","additionalProperties":false,"required":["sandbox","process"],"properties":{
          "sandbox":{"type":"string","minLength":1},"process":{"type":"string","minLength":1},
          "offset":{"type":"integer","minimum":0,"description":"Byte offset to read from (default 0)."},
          "maxBytes":{"type":"integer","minimum":1,"maximum":5242880,"description":"At most this much (default 65536)."}}})"),
        schema(R"({"type":"object","required":["output","nextOffset","running"],"properties":{
          "output":{"type":"string"},"offset":{"type":"integer"},"nextOffset":{"type":"integer"},"more":{"type":"boolean"},
          "running":{"type":"boolean"},"exitCode":{"type":["integer","null"]},"signal":{"type":["integer","null"]}}})"),
        hints(true, false, true), output});
    tools.push_back(ToolSpec{
        "write_stdin", "Write to a started command's input",
        "Sends text (or base64 bytes) to the standard input of a command started with exec_start openStdin; "
        "eof closes it (e.g. to end cat, or a REPL). Waits up to 10 s for the command to read it.",
        schema(R"({"type":"object","additionalProperties":false,"required":["sandbox","process"],"properties":{
          "sandbox":{"type":"string","minLength":1},"process":{"type":"string","minLength":1},
          "text":{"type":"string","maxLength":5242880},"base64":{"type":"string","maxLength":7000000},
          "eof":{"type":"boolean","description":"Close its input after this (default false)."}}})"),
        schema(R"({"type":"object","required":["written","open"],"properties":{"written":{"type":"integer"},
          "open":{"type":"boolean"},"complete":{"type":"boolean"}}})"),
        hints(false, true, false), write_stdin});
    tools.push_back(ToolSpec{
        "exec_signal", "Signal a started command",
        "Sends a signal (TERM, KILL, INT, HUP, …, or a number) to the command's process group.",
        schema(R"({"type":"object","additionalProperties":false,"required":["sandbox","process","signal"],"properties":{
          "sandbox":{"type":"string","minLength":1},"process":{"type":"string","minLength":1},
          "signal":{"type":["string","integer"],"description":"TERM, KILL, INT, HUP, USR1, … or 1-64"}}})"),
        schema(R"({"type":"object","required":["delivered"],"properties":{"delivered":{"type":"boolean"}}})"),
        hints(false, true, false), [](const Json& args, ToolContext& ctx) -> Result<Json> {
            auto answer = call_json(ctx.api, post(process_path(args, "/signal"), Json{{"signal", args["signal"]}}));
            if (!answer) {
                return answer.error();
            }
            return Json{{"delivered", answer->value("delivered", false)}};
        }});
}

}  // namespace sbx::mcp

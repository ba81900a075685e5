// Detached processes (docs/api.md, "Processes"): list, status with the
// output's tail, the output as server-sent events from an offset, and
// signals. A route that sees a process's exit finishes its history row.
#include <sys/socket.h>

#include <array>
#include <charconv>
#include <csignal>

#include "guest-agent/exec/exec_client.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "base/base64.hpp"
#include "host-tools/sbxd/daemon/exec_request.hpp"
#include "host-tools/sbxd/daemon/guest_routes.hpp"

namespace sbx::sbxd {

namespace {

using http::Response;
using nlohmann::json;

constexpr std::uint64_t kTailBytes = 4096;

std::optional<int> optional_int(const json& entry, const char* name) {
    auto it = entry.find(name);
    if (it == entry.end() || !it->is_number_integer()) {
        return std::nullopt;
    }
    return it->get<int>();
}

// A proc_list / proc_status entry as the API shows it.
json process_json(const json& entry) {
    json command = nullptr;
    if (auto argv = entry.find("argv"); argv != entry.end() && argv->is_array()) {
        command = *argv;
    } else if (auto shell = entry.find("shell"); shell != entry.end() && shell->is_string()) {
        command = json::array({"/bin/sh", "-c", *shell});
    }
    auto code = optional_int(entry, "code");
    auto signal = optional_int(entry, "signal");
    auto number = [&](const char* name) { return entry.contains(name) ? entry[name] : json(nullptr); };
    return {{"id", number("id")},
            {"pid", number("pid")},
            {"command", command},
            {"running", entry.value("running", false)},
            {"exitCode", code ? json(*code) : json(nullptr)},
            {"signal", signal ? json(*signal) : json(nullptr)},
            {"timedOut", entry.value("timed_out", false)},
            {"startedAtMs", number("started_at")},
            {"outputBytes", number("end_offset")}};
}

Result<std::uint64_t> parse_offset(std::string_view text, std::string_view what) {
    std::uint64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
        return api::invalid_argument(fmt::format("{} must be a byte offset", what));
    }
    return value;
}

}  // namespace

Result<int> parse_signal(const json& value) {
    static constexpr std::pair<std::string_view, int> kNames[] = {
        {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL}, {"TERM", SIGTERM},
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"ALRM", SIGALRM},
        {"PIPE", SIGPIPE}, {"WINCH", SIGWINCH},
    };
    if (value.is_number_integer()) {
        auto n = value.get<std::int64_t>();
        if (n >= 1 && n <= 64) {
            return static_cast<int>(n);
        }
    } else if (value.is_string()) {
        std::string_view name = value.get_ref<const std::string&>();
        if (name.substr(0, 3) == "SIG") {
            name.remove_prefix(3);
        }
        for (const auto& [known, number] : kNames) {
            if (name == known) {
                return number;
            }
        }
        if (auto n = parse_offset(name, "signal"); n && *n >= 1 && *n <= 64) {
            return static_cast<int>(*n);
        }
    }
    return api::invalid_argument("signal must be a name (TERM, SIGKILL, ...) or a number 1 to 64");
}

Response GuestRoutes::list_processes(const Request& request, const PathParams& params) const {
    const std::string& id = params.at("id");
    auto client = connect(id);
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    auto listed = agent::proc_list(**client);
    if (!listed) {
        return Response::error(guest_error(listed.error()), request.request_id);
    }
    json list = json::array();
    for (const auto& entry : (*listed)["processes"]) {
        json process = process_json(entry);
        if (!process["running"].get<bool>() && process["id"].is_string()) {
            saw_exit(id, process["id"], optional_int(entry, "code"), optional_int(entry, "signal"));
        }
        list.push_back(std::move(process));
    }
    return Response::ok({{"processes", list}}, request.request_id);
}

Response GuestRoutes::get_process(const Request& request, const PathParams& params) const {
    const std::string& id = params.at("id");
    const std::string& proc = params.at("proc");
    auto client = connect(id);
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    auto status = agent::proc_status(**client, proc);
    if (!status) {
        return Response::error(guest_error(status.error()), request.request_id);
    }
    // The agent's tail is text; the API's is the bytes: read them from the
    // log (a non-following attach is what is there now).
    const std::uint64_t end = status->value("end_offset", std::uint64_t{0});
    const std::uint64_t first = status->value("first_offset", std::uint64_t{0});
    std::string tail;
    // Bounded whatever the guest's agent sends: only the last kTailBytes
    // are kept as they come.
    auto sink = [&tail](agent::Channel, std::uint64_t, std::span<const std::uint8_t> data) {
        tail.append(reinterpret_cast<const char*>(data.data()), data.size());
        if (tail.size() > 2 * kTailBytes) {
            tail.erase(0, tail.size() - kTailBytes);
        }
    };
    auto attached = agent::attach(**client, proc, std::max(first, end > kTailBytes ? end - kTailBytes : 0), false, sink);
    if (!attached) {
        return Response::error(guest_error(attached.error()), request.request_id);
    }
    if (tail.size() > kTailBytes) {
        tail.erase(0, tail.size() - kTailBytes);
    }
    json process = process_json(*status);
    process["running"] = attached->running;
    process["outputBytes"] = attached->end_offset;
    if (!attached->running) {
        process["exitCode"] = attached->exit.code ? json(*attached->exit.code) : json(nullptr);
        process["signal"] = attached->exit.signal ? json(*attached->exit.signal) : json(nullptr);
        saw_exit(id, proc, attached->exit.code, attached->exit.signal);
    }
    process["tail"] = base64_encode(tail);
    return Response::ok({{"process", process}}, request.request_id);
}

Response GuestRoutes::process_output(const Request& request, const PathParams& params) const {
    const std::string id = params.at("id");
    const std::string proc = params.at("proc");
    // ?offset=, else a reconnecting EventSource's Last-Event-ID (the id
    // of each event is the offset after it).
    std::string_view offset_name = "offset";
    std::string_view offset_text = request.query_value(offset_name);
    if (offset_text.empty()) {
        offset_name = "Last-Event-ID";
        offset_text = request.header(offset_name);
    }
    std::uint64_t offset = 0;
    if (!offset_text.empty()) {
        auto parsed = parse_offset(offset_text, offset_name);
        if (!parsed) {
            return Response::error(parsed.error(), request.request_id);
        }
        offset = *parsed;
    }
    // ?follow=false: what is there now, then `running` or `exit`.
    const std::string_view follow_text = request.query_value("follow");
    if (!follow_text.empty() && follow_text != "true" && follow_text != "false") {
        return Response::error(api::invalid_argument("follow must be true or false"), request.request_id);
    }
    const bool follow = follow_text != "false";
    auto client = connect(id);
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    // Checked before the stream begins, so that an unknown process or an
    // offset out of range is an error status.
    auto status = agent::proc_status(**client, proc);
    if (!status) {
        return Response::error(guest_error(status.error()), request.request_id);
    }
    const std::uint64_t first = status->value("first_offset", std::uint64_t{0});
    const std::uint64_t end = status->value("end_offset", std::uint64_t{0});
    if (offset > end) {
        return Response::error(
            api::invalid_argument(fmt::format("offset {} is past the output's end ({})", offset, end)),
            request.request_id);
    }
    if (offset < first) {
        return Response::error(api::invalid_argument(fmt::format(
                                   "the output before offset {} is no longer kept (asked for {})", first, offset)),
                               request.request_id);
    }
    Response response;
    response.headers.emplace_back("Content-Type", "text/event-stream");
    response.headers.emplace_back("Cache-Control", "no-cache");
    response.stream = [this, client = *client, id, proc, offset, follow](http::BodyWriter& out) {
        auto hook = out.on_cancel([fd = client->stream().fd()] { ::shutdown(fd, SHUT_RDWR); });
        // Server-sent events (HTML Living Standard §9.2): the id of each is
        // the offset just after its bytes, so a reconnect with
        // Last-Event-ID goes on from the next byte.
        auto sink = [&out](agent::Channel, std::uint64_t at, std::span<const std::uint8_t> data) {
            std::string_view bytes(reinterpret_cast<const char*>(data.data()), data.size());
            [[maybe_unused]] auto r = out.write(
                fmt::format("id: {}\nevent: output\ndata: {}\n\n", at + data.size(), base64_encode(bytes)));
        };
        auto attached = agent::attach(*client, proc, offset, follow, sink);
        if (out.cancelled()) {
            return;
        }
        if (attached && attached->running) {  // only without follow
            [[maybe_unused]] auto r = out.write(fmt::format("event: running\ndata: {}\n\n",
                                                            json{{"outputBytes", attached->end_offset}}.dump()));
            return;
        }
        if (!attached) {
            Error error = guest_error(attached.error());
            [[maybe_unused]] auto r = out.write(fmt::format(
                "event: error\ndata: {}\n\n", json{{"code", error.code}, {"message", error.message}}.dump()));
            return;
        }
        saw_exit(id, proc, attached->exit.code, attached->exit.signal);
        json exit = {{"exitCode", attached->exit.code ? json(*attached->exit.code) : json(nullptr)},
                     {"signal", attached->exit.signal ? json(*attached->exit.signal) : json(nullptr)}};
        if (attached->exit.timed_out) {
            exit["timedOut"] = true;
        }
        [[maybe_unused]] auto r = out.write(fmt::format("event: exit\ndata: {}\n\n", exit.dump()));
    };
    return response;
}

Response GuestRoutes::signal_process(const Request& request, const PathParams& params) const {
    auto body = api::parse_body(request.body);
    if (!body) {
        return Response::error(body.error(), request.request_id);
    }
    auto value = body->find("signal");
    if (value == body->end() || body->size() != 1) {
        return Response::error(api::invalid_argument("the body is {\"signal\": NAME or NUMBER}"), request.request_id);
    }
    auto sig = parse_signal(*value);
    if (!sig) {
        return Response::error(sig.error(), request.request_id);
    }
    auto client = connect(params.at("id"));
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    auto sent = agent::proc_signal(**client, params.at("proc"), *sig);
    if (!sent) {
        return Response::error(guest_error(sent.error()), request.request_id);
    }
    return Response::ok({{"delivered", *sent}}, request.request_id);
}

// {"data":"<base64>","eof":false} -> {"written":N,"open":bool}: what the
// process's stdin pipe took now (docs/api.md); the rest is the client's to
// send again.
Response GuestRoutes::process_stdin(const Request& request, const PathParams& params) const {
    auto body = api::parse_body(request.body);
    if (!body) {
        return Response::error(body.error(), request.request_id);
    }
    api::Fields fields(*body);
    auto data = fields.string("data");
    auto eof = fields.boolean("eof");
    if (!data || !eof) {
        return Response::error(data ? eof.error() : data.error(), request.request_id);
    }
    if (auto r = fields.finish(); !r) {
        return Response::error(r.error(), request.request_id);
    }
    auto bytes = base64_decode(data->value_or(""));
    if (!bytes) {
        return Response::error(api::invalid_argument("data: " + bytes.error().message), request.request_id);
    }
    auto client = connect(params.at("id"));
    if (!client) {
        return Response::error(client.error(), request.request_id);
    }
    auto wrote = agent::proc_stdin(**client, params.at("proc"),
                                   std::span(reinterpret_cast<const std::uint8_t*>(bytes->data()), bytes->size()),
                                   eof->value_or(false));
    if (!wrote) {
        return Response::error(guest_error(wrote.error()), request.request_id);
    }
    return Response::ok({{"written", wrote->written}, {"open", wrote->open}}, request.request_id);
}

}  // namespace sbx::sbxd

// `sbx mcp`: an MCP server on stdio (MCP 2025-11-25 basic/transports
// "stdio"; 2026-07-28 basic/transports/stdio): one JSON-RPC message a line
// on stdin, replies a line each on stdout and nothing else there, a log
// line a tool call on stderr. Tool calls run on threads of their own (a
// long exec does not hold up a ping or a second call), at most
// kMaxInFlight at once; the rest of the protocol runs in order on the
// reading thread. Every tool is a call to sbxd's API with this sbx's
// host and key (host-tools/mcp), but forward and unforward, which open and
// close local ports here (forward_listener.hpp). At the end of stdin the calls under way
// finish, then the server exits (2026-07-28: SHOULD exit on stdin EOF).
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <list>
#include <map>
#include <mutex>
#include <semaphore>
#include <thread>

#include <toml++/toml.h>

#include "host-tools/mcp/protocol.hpp"
#include "host-tools/sbx/commands.hpp"
#include "host-tools/sbx/forward_listener.hpp"
#include "host-tools/sbx/ssh_setup.hpp"

namespace sbx::cli {

namespace {

constexpr std::ptrdiff_t kMaxInFlight = 16;

// The MCP layer's API calls over sbx's HTTP client.
class ClientCaller final : public mcp::ApiCaller {
public:
    explicit ClientCaller(const HttpClient& client) : client_(client) {}

    Result<mcp::ApiHead> call(const mcp::ApiCall& call, const mcp::BodySink& sink) override {
        HttpRequest request{call.method, call.target, call.body, call.headers};
        auto stream = client_.open(request);
        if (!stream) {
            return stream.error();
        }
        mcp::ApiHead head{static_cast<int>(stream->status()), stream->header("Content-Type")};
        std::array<char, 64 * 1024> buffer{};
        while (true) {
            auto n = stream->read(buffer);
            if (!n) {
                return n.error();
            }
            if (*n == 0 || !sink(std::string_view(buffer.data(), *n))) {
                return head;  // the end, or the sink had enough: the stream's connection closes
            }
        }
    }

private:
    const HttpClient& client_;
};

// [mcp] defaults from the config file, then the flags over them.
Result<mcp::ToolDefaults> load_defaults(const McpCommand& command) {
    mcp::ToolDefaults defaults;
    std::string path = command.config;
    if (path.empty()) {
        if (auto dir = sbx_config_dir(std::getenv("XDG_CONFIG_HOME"), std::getenv("HOME"))) {
            path = *dir + "/mcp.toml";
        }
    }
    if (!path.empty() && (!command.config.empty() || ::access(path.c_str(), F_OK) == 0)) {
        toml::table table;
        try {
            table = toml::parse_file(path);
        } catch (const toml::parse_error& e) {
            return make_coded_error("usage", "{}: {}", path, e.description());
        }
        for (const auto& [key, value] : table) {
            if (key == "size" && value.is_string()) {
                defaults.size = value.as_string()->get();
            } else if (key == "ttl" && value.is_string()) {
                defaults.ttl = value.as_string()->get();
            } else if (key == "idle_minutes" && value.is_integer() && value.as_integer()->get() >= 0) {
                defaults.idle_minutes = static_cast<unsigned>(value.as_integer()->get());
            } else if (key == "labels" && value.is_table()) {
                for (const auto& [name, label] : *value.as_table()) {
                    if (!label.is_string()) {
                        return make_coded_error("usage", "{}: labels.{} must be a string", path, name.str());
                    }
                    defaults.labels[std::string(name.str())] = label.as_string()->get();
                }
            } else {
                return make_coded_error("usage", "{}: unknown or mistyped key {} (size, ttl, idle_minutes, labels)",
                                        path, key.str());
            }
        }
    }
    if (!command.size.empty()) {
        defaults.size = command.size;
    }
    if (!command.ttl.empty()) {
        defaults.ttl = command.ttl;
    }
    if (command.idle_minutes) {
        defaults.idle_minutes = command.idle_minutes;
    }
    auto labels = parse_assignments(command.labels, "--label");
    if (!labels) {
        return labels.error();
    }
    for (auto& [key, value] : *labels) {
        defaults.labels[key] = value;
    }
    return defaults;
}

// `sbx mcp`'s own tools: forwards of local ports, which only a server on
// the user's machine can open (sbxd's /mcp has host_port instead). Each
// lives until unforward or the end of the server.
class Forwards {
public:
    explicit Forwards(const Context& ctx) : ctx_(ctx) {}

    void add_tools(std::vector<mcp::ToolSpec>& tools) {
        tools.push_back(mcp::ToolSpec{
            "forward", "Forward a local port",
            "Opens 127.0.0.1:localPort on this machine (any free port if not given) and carries each connection "
            "to the sandbox's port, e.g. to open a dev server in a local browser or connect a local client. "
            "It lasts until unforward or until this MCP server ends.",
            mcp::schema(R"({"type":"object","additionalProperties":false,"required":["sandbox","port"],"properties":{
              "sandbox":{"type":"string","minLength":1},"port":{"type":"integer","minimum":1,"maximum":65535},
              "localPort":{"type":"integer","minimum":0,"maximum":65535}}})"),
            mcp::schema(R"({"type":"object","required":["local","localPort","url"],"properties":{
              "sandbox":{"type":"string"},"port":{"type":"integer"},"local":{"type":"string"},
              "localPort":{"type":"integer"},"url":{"type":"string"}}})"),
            mcp::hints(false, false, false),
            [this](const mcp::Json& args, mcp::ToolContext&) { return forward(args); }});
        tools.push_back(mcp::ToolSpec{
            "unforward", "Stop forwarding a local port", "Closes a local port that forward opened.",
            mcp::schema(R"({"type":"object","additionalProperties":false,"required":["localPort"],"properties":{
              "localPort":{"type":"integer","minimum":1,"maximum":65535}}})"),
            mcp::schema(R"({"type":"object","required":["localPort"],"properties":{"localPort":{"type":"integer"}}})"),
            mcp::hints(false, true, true),
            [this](const mcp::Json& args, mcp::ToolContext&) -> Result<mcp::Json> {
                const auto port = args["localPort"].get<std::uint16_t>();
                std::unique_ptr<ForwardListener> gone;
                {
                    std::lock_guard lock(mutex_);
                    auto it = forwards_.find(port);
                    if (it == forwards_.end()) {
                        return make_coded_error("not_found", "no forward on local port {}", port);
                    }
                    gone = std::move(it->second);
                    forwards_.erase(it);
                }
                return mcp::Json{{"localPort", port}};  // `gone` ends its connections here
            }});
    }

private:
    Result<mcp::Json> forward(const mcp::Json& args) {
        const std::string id = args["sandbox"];
        const auto port = args["port"].get<std::uint16_t>();
        auto started = ForwardListener::start(ctx_, id, args.value("localPort", std::uint16_t{0}), port,
                                              [](const std::string& what, const std::string& why) {
                                                  std::fprintf(stderr, "sbx mcp: forward: %s: %s\n", what.c_str(),
                                                               why.c_str());
                                              });
        if (!started) {
            return started.error();
        }
        const std::uint16_t local = (*started)->local_port();
        mcp::Json out = {{"sandbox", id},
                         {"port", port},
                         {"local", (*started)->local_address()},
                         {"localPort", local},
                         {"url", fmt::format("http://127.0.0.1:{}/", local)}};
        std::lock_guard lock(mutex_);
        forwards_[local] = std::move(*started);
        return out;
    }

    const Context& ctx_;
    std::mutex mutex_;
    std::map<std::uint16_t, std::unique_ptr<ForwardListener>> forwards_;
};

class StdioServer {
public:
    StdioServer(const Context& ctx, mcp::Protocol protocol) : ctx_(ctx), protocol_(std::move(protocol)) {}

    int run() {
        std::string line;
        while (std::getline(std::cin, line)) {
            if (line.empty() || line == "\r") {
                continue;
            }
            reap();
            const mcp::Json message = mcp::Json::parse(line, nullptr, false);
            if (message.is_object() && message.value("method", "") == "tools/call" && message.contains("id")) {
                slots_.acquire();
                Worker& worker = workers_.emplace_back();
                worker.thread = std::thread([this, message, &worker] {
                    ClientCaller api(ctx_.client);
                    mcp::Session unused;  // tools/call reads no session state
                    const auto start = std::chrono::steady_clock::now();
                    auto reply = protocol_.handle(message, unused, api);
                    log_call(message, reply, std::chrono::steady_clock::now() - start);
                    write(reply);
                    worker.done = true;
                    slots_.release();
                });
                continue;
            }
            ClientCaller api(ctx_.client);
            write(message.is_discarded() ? protocol_.handle_text(line, session_, api)
                                         : protocol_.handle(message, session_, api));
        }
        for (auto& worker : workers_) {
            worker.thread.join();
        }
        return kExitOk;
    }

private:
    void write(const std::optional<mcp::Json>& reply) {
        if (!reply) {
            return;
        }
        // One line: dump() escapes every newline inside strings.
        const std::string text = reply->dump(-1, ' ', false, mcp::Json::error_handler_t::replace) + "\n";
        std::lock_guard lock(out_mutex_);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
    }

    static void log_call(const mcp::Json& message, const std::optional<mcp::Json>& reply,
                         std::chrono::steady_clock::duration took) {
        const auto& params = message.value("params", mcp::Json::object());
        std::string outcome = "ok";
        if (!reply || reply->contains("error")) {
            outcome = "protocol error";
        } else if ((*reply)["result"].value("isError", false)) {
            outcome = "tool error";
        }
        std::fprintf(stderr, "sbx mcp: %s: %s in %lld ms\n",
                     params.value("name", mcp::Json("?")).is_string() ? params["name"].get<std::string>().c_str() : "?",
                     outcome.c_str(),
                     static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
    }

    // Threads whose calls have ended are joined as new lines come.
    void reap() {
        workers_.remove_if([](Worker& worker) {
            if (!worker.done) {
                return false;
            }
            worker.thread.join();
            return true;
        });
    }

    struct Worker {
        std::thread thread;
        std::atomic<bool> done = false;
    };

    const Context& ctx_;
    mcp::Protocol protocol_;
    mcp::Session session_;
    std::counting_semaphore<kMaxInFlight> slots_{kMaxInFlight};
    std::list<Worker> workers_;  // a list: a worker refers to its own entry
    std::mutex out_mutex_;
};

}  // namespace

int run_mcp(const Context& ctx, const McpCommand& command, std::string_view version) {
    auto defaults = load_defaults(command);
    if (!defaults) {
        std::fprintf(stderr, "sbx mcp: %s\n", defaults.error().message.c_str());
        return kExitUsage;
    }
    mcp::ServerInfo info;
    info.version = std::string(version);
    info.instructions = mcp::kInstructions;
    std::fprintf(stderr, "sbx mcp: serving MCP on stdio for sbxd at %s\n", ctx.client.address().to_string().c_str());
    Forwards forwards(ctx);  // outlives the server: its tools refer to it
    std::vector<mcp::ToolSpec> tools = mcp::sandbox_tools();
    forwards.add_tools(tools);
    StdioServer server(ctx, mcp::Protocol(std::move(tools), std::move(info), std::move(*defaults)));
    return server.run();
}

}  // namespace sbx::cli

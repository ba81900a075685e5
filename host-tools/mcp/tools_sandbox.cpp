// Sandboxes, snapshots and hosted ports: each tool one API call
// (docs/api.md "Routes", "Hosted ports"), its answer passed on.
#include <fmt/format.h>

#include "host-tools/mcp/tools.hpp"

namespace sbx::mcp {

namespace {

const char* const kOneSandbox = R"({"type":"object","required":["sandbox"],"properties":{
  "sandbox":{"type":"object","description":"The sandbox as GET /v1/sandboxes/{id} shows it"}}})";
const char* const kManySandboxes = R"({"type":"object","required":["sandboxes"],"properties":{
  "sandboxes":{"type":"array","items":{"type":"object"}}}})";

// labels=k=v,k2=v2 (docs/api.md, GET /v1/sandboxes)
std::string label_query(const Json& labels) {
    std::string joined;
    for (const auto& [key, value] : labels.items()) {
        joined += (joined.empty() ? "" : ",") + key + "=" + value.get<std::string>();
    }
    return url_encode(joined);
}

Result<Json> create(const Json& args, ToolContext& ctx) {
    Json body = args;
    body.erase("idempotencyKey");
    const bool sized = args.contains("size") || args.contains("cpus") || args.contains("memoryMib");
    if (!sized && !ctx.defaults.size.empty()) {
        body["size"] = ctx.defaults.size;
    }
    if (!args.contains("ttl") && !args.value("noAutoStop", false) && !ctx.defaults.ttl.empty()) {
        body["ttl"] = ctx.defaults.ttl;
    }
    if (!args.contains("idleMinutes") && ctx.defaults.idle_minutes) {
        body["idleMinutes"] = *ctx.defaults.idle_minutes;
    }
    if (!ctx.defaults.labels.empty()) {
        Json labels = ctx.defaults.labels;
        labels.update(args.value("labels", Json::object()));
        body["labels"] = labels;
    }
    ApiCall call = post("/v1/sandboxes", body);
    if (args.contains("idempotencyKey")) {
        call.headers.emplace_back("Idempotency-Key", args["idempotencyKey"].get<std::string>());
    }
    auto answer = call_json(ctx.api, call);
    if (!answer) {
        return answer.error();
    }
    return keep(*answer, {"sandbox", "warnings", "replayed", "memoryRestored", "startReason"});
}

Result<Json> list(const Json& args, ToolContext& ctx) {
    std::string target = "/v1/sandboxes";
    std::string sep = "?";
    if (args.contains("labels") && !args["labels"].empty()) {
        target += sep + "labels=" + label_query(args["labels"]);
        sep = "&";
    }
    if (args.contains("state") && !args["state"].empty()) {
        std::string states;
        for (const auto& state : args["state"]) {
            states += (states.empty() ? "" : ",") + state.get<std::string>();
        }
        target += sep + "state=" + url_encode(states);
    }
    auto answer = call_json(ctx.api, get(target));
    if (!answer) {
        return answer.error();
    }
    return keep(*answer, {"sandboxes"});
}

// One call whose answer's named fields are the result.
ToolSpec simple(std::string name, std::string title, std::string description, const std::string& input,
                const char* output, Json annotations,
                std::function<ApiCall(const Json&)> make_call, std::initializer_list<const char*> fields) {
    std::vector<const char*> kept(fields);
    return ToolSpec{std::move(name),        std::move(title),       std::move(description), schema(input.c_str()),
                    schema(output),         std::move(annotations),
                    [make_call = std::move(make_call), kept](const Json& args, ToolContext& ctx) -> Result<Json> {
                        auto answer = call_json(ctx.api, make_call(args));
                        if (!answer) {
                            return answer.error();
                        }
                        return keep(*answer, kept);
                    }};
}

Result<Json> handoff(const Json& args, ToolContext& ctx) {
    const std::string id = args.at("sandbox").get<std::string>();
    auto sandbox = call_json(ctx.api, get(sandbox_path(args)));
    if (!sandbox) {
        return sandbox.error();
    }
    auto ports = call_json(ctx.api, get(sandbox_path(args, "/ports")));
    if (!ports) {
        return ports.error();
    }
    Json urls = Json::array();
    for (const auto& port : member(*ports, "hostedPorts")) {
        Json entry = {{"port", member(port, "port")}, {"url", member(port, "url")}, {"public", member(port, "public")}};
        if (port.contains("tokenUrl")) {
            entry["tokenUrl"] = port["tokenUrl"];  // opens the private URL in a browser once (docs/sbxd.md)
        }
        urls.push_back(std::move(entry));
    }
    const std::string& sbx = ctx.defaults.sbx_command;
    return Json{{"sandbox", id},
                {"state", member(member(*sandbox, "sandbox"), "state")},
                {"ssh", fmt::format("{} ssh {}", sbx, id)},
                {"shell", fmt::format("{} exec -t {} -- bash -l", sbx, id)},
                {"sshConfig", fmt::format("{} ssh-config --install   # then: ssh {}.sbx", sbx, id)},
                {"hostedPorts", urls}};
}

}  // namespace

void add_sandbox_tools(std::vector<ToolSpec>& tools) {
    tools.push_back(ToolSpec{
        "sandbox_create", "Create a sandbox",
        "Creates a disposable Linux microVM (Debian with the usual tools, sudo, network, its own disk) and "
        "returns once its agent answers, usually in about a second from a warm template. Unset options take "
        "this server's defaults.",
        schema(R"({"type":"object","additionalProperties":false,"properties":{
          "from":{"type":"string","description":"An image (default: the full one; slim) or a named snapshot to start from"},
          "size":{"type":"string","enum":["small","default","large","xlarge"],
                  "description":"small 2 vCPU/4 GiB, default 4/8, large 8/16, xlarge 16/32"},
          "cpus":{"type":"integer","minimum":1,"maximum":256},
          "memoryMib":{"type":"integer","minimum":256},
          "diskGib":{"type":"integer","minimum":1,"maximum":2048},
          "labels":{"type":"object","additionalProperties":{"type":"string"},"description":"Labels to find it by later"},
          "env":{"type":"object","additionalProperties":{"type":"string"},"description":"Environment for every command"},
          "ttl":{"type":"string","description":"Auto-stop after this long: 90s, 30m, 2h30m, 7d"},
          "noAutoStop":{"type":"boolean"},
          "idleMinutes":{"type":"integer","minimum":0,"maximum":43200,"description":"Pause when idle this long (0: never)."},
          "egress":{"type":"string","enum":["internet","deny-all","allow-list"]},
          "egressAllow":{"type":"array","items":{"type":"string"},"description":"IPv4 networks for allow-list"},
          "idempotencyKey":{"type":"string","minLength":1,"maxLength":255,
                            "description":"The same key again returns the same sandbox instead of a second one"}}})"),
        schema(R"({"type":"object","required":["sandbox"],"properties":{
          "sandbox":{"type":"object"},"warnings":{"type":"array","items":{"type":"string"}},
          "replayed":{"type":"boolean"},"memoryRestored":{"type":"boolean"},"startReason":{"type":"string"}}})"),
        hints(false, false, false), create});
    tools.push_back(ToolSpec{
        "sandbox_list", "List sandboxes", "Lists this host's sandboxes, optionally only those with every label given "
        "and in one of the states given.",
        schema(R"({"type":"object","additionalProperties":false,"properties":{
          "labels":{"type":"object","additionalProperties":{"type":"string"}},
          "state":{"type":"array","items":{"type":"string",
                   "enum":["creating","running","stopping","stopped","paused","crashed"]}}}})"),
        schema(kManySandboxes), hints(true, false, true), list});
    tools.push_back(simple("sandbox_get", "Show a sandbox", "One sandbox: state, size, labels, network, auto-stop.",
                           with_id(""), kOneSandbox, hints(true, false, true),
                           [](const Json& a) { return get(sandbox_path(a)); }, {"sandbox"}));
    tools.push_back(simple("sandbox_delete", "Delete a sandbox",
                           "Ends the sandbox's VM and deletes its disk, memory and hosted URLs. Cannot be undone.",
                           with_id(""), R"({"type":"object","properties":{"deleted":{"type":"array","items":{"type":"string"}}}})",
                           hints(false, true, true), [](const Json& a) { return del(sandbox_path(a)); }, {"deleted"}));
    tools.push_back(simple(
        "sandbox_stop", "Stop a sandbox",
        "Stops the sandbox; with memory (the default) its processes come back exactly where they were on resume. "
        "A stopped sandbox uses no CPU or RAM; its files can still be read.",
        with_id(R"(,"memory":{"type":"boolean","description":"Keep the memory (default true)."})"), kOneSandbox,
        hints(false, false, true),
        [](const Json& a) { return post(sandbox_path(a, "/stop"), Json{{"memory", a.value("memory", true)}}); },
        {"sandbox"}));
    tools.push_back(simple("sandbox_resume", "Resume a sandbox",
                           "Starts a stopped, paused or crashed sandbox again, from its memory when it was kept.",
                           with_id(""), R"({"type":"object","required":["sandbox"],"properties":{
                             "sandbox":{"type":"object"},"memoryRestored":{"type":"boolean"},"resumeReason":{"type":"string"}}})",
                           hints(false, false, true),
                           [](const Json& a) { return post(sandbox_path(a, "/resume"), Json::object()); },
                           {"sandbox", "memoryRestored", "resumeReason"}));
    tools.push_back(simple(
        "sandbox_fork", "Fork a sandbox",
        "Makes copies of a running sandbox that share its memory copy-on-write: every process, file and open "
        "connection as it is now, each copy then going its own way. Good for trying several approaches at once.",
        with_id(R"(,"count":{"type":"integer","minimum":1,"maximum":16,"description":"How many copies (default 1)."},
                  "memory":{"type":"boolean","description":"Copy the running memory (default true); false: disk only"})"),
        kManySandboxes, hints(false, false, false),
        [](const Json& a) {
            return post(sandbox_path(a, "/fork"), Json{{"count", a.value("count", 1)}, {"memory", a.value("memory", true)}});
        },
        {"sandboxes"}));
    const char* const kSnapshot = R"({"type":"object","required":["snapshot"],"properties":{"snapshot":{"type":"object"}}})";
    tools.push_back(simple(
        "snapshot_create", "Snapshot a sandbox",
        "Saves the sandbox (memory and disk) under a name; sandbox_create with from=NAME starts new sandboxes "
        "from it. The sandbox runs on.",
        with_id(R"(,"name":{"type":"string","minLength":1,"maxLength":63,"description":"a-z 0-9 . _ -"})",
                R"(["sandbox","name"])"),
        kSnapshot, hints(false, false, false),
        [](const Json& a) { return post(sandbox_path(a, "/snapshot"), Json{{"name", a["name"]}}); }, {"snapshot"}));
    tools.push_back(simple("snapshot_list", "List snapshots", "The named snapshots on this host, oldest first.",
                           R"({"type":"object","additionalProperties":false,"properties":{}})",
                           R"({"type":"object","required":["snapshots"],"properties":{"snapshots":{"type":"array","items":{"type":"object"}}}})",
                           hints(true, false, true), [](const Json&) { return get("/v1/snapshots"); }, {"snapshots"}));
    tools.push_back(simple("snapshot_delete", "Delete a snapshot", "Deletes a named snapshot. Cannot be undone.",
                           R"({"type":"object","additionalProperties":false,"required":["name"],
                              "properties":{"name":{"type":"string","minLength":1,"maxLength":63}}})",
                           R"({"type":"object","properties":{}})", hints(false, true, true),
                           [](const Json& a) { return del("/v1/snapshots/" + url_encode(a["name"].get<std::string>())); },
                           {}));
    tools.push_back(simple(
        "host_port", "Host a port over HTTPS",
        "Serves a port of the sandbox at an HTTPS URL of its own (a web app, an API, a notebook). Private by "
        "default: open tokenUrl once in a browser. A paused sandbox wakes on a request.",
        with_id(R"(,"port":{"type":"integer","minimum":1,"maximum":65535},
                  "public":{"type":"boolean","description":"No token needed (default false)."},
                  "localhost":{"type":"boolean","description":"The app listens on the guest's 127.0.0.1 only"})",
                R"(["sandbox","port"])"),
        R"({"type":"object","required":["hostedPort"],"properties":{"hostedPort":{"type":"object","required":["url"],
            "properties":{"url":{"type":"string"},"tokenUrl":{"type":"string"},"port":{"type":"integer"}}}}})",
        hints(false, false, true),
        [](const Json& a) {
            Json body = {{"port", a["port"]}};
            for (const char* name : {"public", "localhost"}) {
                if (a.contains(name)) {
                    body[name] = a[name];
                }
            }
            return post(sandbox_path(a, "/ports"), body);
        },
        {"hostedPort"}));
    tools.push_back(simple("unhost_port", "Stop hosting a port", "Its URL answers 404 from now on.",
                           with_id(R"(,"port":{"type":"integer","minimum":1,"maximum":65535})", R"(["sandbox","port"])"),
                           R"({"type":"object","properties":{"unhosted":{"type":"integer"}}})", hints(false, true, true),
                           [](const Json& a) { return del(sandbox_path(a, fmt::format("/ports/{}", a["port"].get<int>()))); },
                           {"unhosted"}));
    tools.push_back(ToolSpec{
        "handoff_session", "Hand a sandbox to a person",
        "What a person needs to take over the sandbox: the ssh and shell commands and its hosted URLs.",
        schema(with_id("").c_str()),
        schema(R"({"type":"object","required":["sandbox","ssh","hostedPorts"],"properties":{
          "sandbox":{"type":"string"},"state":{"type":"string"},"ssh":{"type":"string"},"shell":{"type":"string"},
          "sshConfig":{"type":"string"},"hostedPorts":{"type":"array","items":{"type":"object"}}}})"),
        hints(true, false, true), handoff});
}

}  // namespace sbx::mcp

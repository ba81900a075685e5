// new, ls, info, stop, resume, ttl, idle, egress, fork, rm, history, events, snapshot.
#include <chrono>
#include <cstdlib>
#include <thread>

#include "host-tools/sbx/commands.hpp"

namespace sbx::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t elapsed_ms(Clock::time_point since) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

std::string seconds(std::int64_t ms) {
    return fmt::format("{:.2f} s", static_cast<double>(ms) / 1000.0);
}

std::optional<std::string> from_environment(const std::string& name) {
    const char* value = std::getenv(name.c_str());
    return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

std::string sandbox_target(const std::string& id, std::string_view action = {}) {
    return action.empty() ? target({"v1", "sandboxes", id}) : target({"v1", "sandboxes", id, action});
}

// "small, 2 vCPU, 4096 MiB" for people.
std::string shape(const Json& sandbox) {
    return fmt::format("{}, {} vCPU, {} MiB", cell(sandbox, "size"), cell(sandbox, "cpus"),
                       cell(sandbox, "memoryMib"));
}

void print_warnings(const Context& ctx, const Json& body) {
    for (const auto& warning : body.value("warnings", Json::array())) {
        std::string text = warning.is_string() ? warning.get<std::string>() : warning.dump();
        if (ctx.out.json()) {
            ctx.out.event({{"type", "warning"}, {"message", text}});
        } else {
            ctx.out.note("warning: " + text);
        }
    }
}

}  // namespace

int run_new(const Context& ctx, const NewCommand& command) {
    auto body = create_body(command.create, from_environment);
    if (!body) {
        return ctx.out.fail(body.error());
    }
    HttpRequest request = post(target({"v1", "sandboxes"}), *body);
    if (!command.idempotency_key.empty()) {
        request.headers.emplace_back("Idempotency-Key", command.idempotency_key);
    }
    auto start = Clock::now();
    if (ctx.out.json()) {
        ctx.out.event({{"type", "creating"}, {"request", *body}});
    } else {
        ctx.out.note("creating a sandbox…");
    }
    Outcome reply = call(ctx, request);
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    print_warnings(ctx, reply.body());
    const Json sandbox = reply.body().value("sandbox", Json::object());
    std::int64_t ms = elapsed_ms(start);
    // So that `sbx ssh ID` works from the start (sbx ssh-proxy would do it
    // too); before the ready line, which scripts take as the last.
    if (!command.no_ssh) {
        if (auto authorized = authorize_ssh_key(ctx, sandbox.value("id", "")); !authorized) {
            if (ctx.out.json()) {
                ctx.out.event({{"type", "warning"}, {"message", authorized.error().to_string()}});
            } else {
                ctx.out.note("warning: " + authorized.error().to_string());
            }
        }
    }
    // From a named snapshot sbxd says whether its memory was restored.
    const Json& b = reply.body();
    const bool from_snapshot = b.contains("memoryRestored");
    if (ctx.out.json()) {
        Json ready = {{"type", "ready"},
                      {"id", sandbox.value("id", Json())},
                      {"replayed", b.value("replayed", false)},
                      {"elapsedMs", ms},
                      {"sandbox", sandbox}};
        if (from_snapshot) {
            ready["memoryRestored"] = b["memoryRestored"];
            ready["startReason"] = b.value("startReason", Json());
        }
        ctx.out.event(ready);
    } else {
        std::string how;
        if (from_snapshot) {
            how = b.value("memoryRestored", false) ? " (memory restored)"
                                                   : " (cold boot: " + cell(b, "startReason") + ")";
        }
        ctx.out.text(fmt::format("{}  {}  {}{}{}  ready in {}\n", cell(sandbox, "id"), cell(sandbox, "state"),
                                 shape(sandbox), b.value("replayed", false) ? " (replayed)" : "", how,
                                 seconds(ms)));
    }
    return kExitOk;
}

int run_ls(const Context& ctx, const std::vector<std::string>& labels,
           const std::vector<std::string>& states) {
    auto list = list_target(labels, states);
    if (!list) {
        return ctx.out.fail(list.error());
    }
    Outcome reply = call(ctx, get(*list));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json sandboxes = reply.body().value("sandboxes", Json::array());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "sandboxes"}, {"sandboxes", sandboxes}});
    } else if (sandboxes.empty()) {
        ctx.out.note("no sandboxes");
    } else {
        ctx.out.text(sandbox_table(sandboxes));
    }
    return kExitOk;
}

int run_info(const Context& ctx, const std::string& id) {
    Outcome reply = call(ctx, get(sandbox_target(id)));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json sandbox = reply.body().value("sandbox", Json::object());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "sandbox"}, {"sandbox", sandbox}});
    } else {
        ctx.out.text(sandbox_details(sandbox));
    }
    return kExitOk;
}

int run_stop(const Context& ctx, const std::string& id, bool disk_only) {
    auto start = Clock::now();
    Outcome reply = call(ctx, post(sandbox_target(id, "stop"), {{"memory", !disk_only}}));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json sandbox = reply.body().value("sandbox", Json::object());
    std::int64_t ms = elapsed_ms(start);
    if (ctx.out.json()) {
        ctx.out.event({{"type", "stopped"},
                       {"id", id},
                       {"memory", !disk_only},
                       {"elapsedMs", ms},
                       {"sandbox", sandbox}});
    } else {
        ctx.out.text(fmt::format("{}  {}{}  in {}\n", id, cell(sandbox, "state"),
                                 disk_only ? " (disk only)" : " (with memory)", seconds(ms)));
    }
    return kExitOk;
}

int run_resume(const Context& ctx, const std::string& id, const std::string& size, const std::string& disk) {
    Json body = Json::object();
    if (!size.empty()) {
        body["size"] = size;
    }
    if (!disk.empty()) {
        auto gib = parse_disk_gib(disk);
        if (!gib) {
            return ctx.out.fail(failure_of(gib.error()));
        }
        body["diskGib"] = *gib;
    }
    auto start = Clock::now();
    if (ctx.out.json()) {
        ctx.out.event({{"type", "resuming"}, {"id", id}});
    } else {
        ctx.out.note("resuming " + id + "…");
    }
    Outcome reply = call(ctx, post(sandbox_target(id, "resume"), body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    print_warnings(ctx, reply.body());
    const Json& b = reply.body();
    const Json sandbox = b.value("sandbox", Json::object());
    bool restored = b.value("memoryRestored", false);
    Json reason = b.value("resumeReason", Json());
    std::int64_t ms = elapsed_ms(start);
    if (ctx.out.json()) {
        ctx.out.event({{"type", "ready"},
                       {"id", id},
                       {"memoryRestored", restored},
                       {"resumeReason", reason},
                       {"elapsedMs", ms},
                       {"sandbox", sandbox}});
    } else {
        std::string how = restored ? "memory restored" : "cold boot (" + cell(b, "resumeReason") + ")";
        ctx.out.text(fmt::format("{}  {}  {}  ready in {}\n", id, cell(sandbox, "state"), how, seconds(ms)));
    }
    return kExitOk;
}

int run_ttl(const Context& ctx, const std::string& id, const std::string& value) {
    auto body = ttl_body(value);
    if (!body) {
        return ctx.out.fail(body.error());
    }
    Outcome reply = call(ctx, post(sandbox_target(id, "ttl"), *body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json sandbox = reply.body().value("sandbox", Json::object());
    const Json at = sandbox.value("autoStopAt", Json());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "ttl"}, {"id", id}, {"autoStopAt", at}, {"sandbox", sandbox}});
    } else if (at.is_string()) {
        ctx.out.text(fmt::format("{}  auto-stop at {}\n", id, at.get<std::string>()));
    } else {
        ctx.out.text(fmt::format("{}  no auto-stop\n", id));
    }
    return kExitOk;
}

int run_idle(const Context& ctx, const std::string& id, const std::string& value) {
    auto body = idle_body(value);
    if (!body) {
        return ctx.out.fail(body.error());
    }
    Outcome reply = call(ctx, post(sandbox_target(id, "idle"), *body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json sandbox = reply.body().value("sandbox", Json::object());
    const Json minutes = sandbox.value("idleMinutes", Json());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "idle"}, {"id", id}, {"idleMinutes", minutes}, {"sandbox", sandbox}});
    } else if (minutes.is_number()) {
        ctx.out.text(fmt::format("{}  idle pause after {} min\n", id, minutes.dump()));
    } else {
        ctx.out.text(fmt::format("{}  no idle pause\n", id));
    }
    return kExitOk;
}

int run_egress(const Context& ctx, const std::string& id, const std::string& value) {
    auto body = egress_body(value);
    if (!body) {
        return ctx.out.fail(body.error());
    }
    Outcome reply = call(ctx, post(sandbox_target(id, "egress"), *body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json sandbox = reply.body().value("sandbox", Json::object());
    const Json mode = sandbox.value("egress", Json());
    const Json allow = sandbox.value("egressAllow", Json::array());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "egress"}, {"id", id}, {"egress", mode}, {"egressAllow", allow}, {"sandbox", sandbox}});
    } else {
        std::string networks;
        for (const auto& n : allow) {
            networks += (networks.empty() ? " " : ",") + n.get<std::string>();
        }
        ctx.out.text(fmt::format("{}  egress {}{}\n", id, cell(sandbox, "egress"), networks));
    }
    return kExitOk;
}

int run_fork(const Context& ctx, const std::string& id, unsigned count, bool disk_only,
             const std::string& idempotency_key) {
    HttpRequest request = post(sandbox_target(id, "fork"), {{"count", count}, {"memory", !disk_only}});
    if (!idempotency_key.empty()) {
        request.headers.emplace_back("Idempotency-Key", idempotency_key);
    }
    auto start = Clock::now();
    Outcome reply = call(ctx, request);
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json children = reply.body().value("sandboxes", Json::array());
    std::int64_t ms = elapsed_ms(start);
    if (ctx.out.json()) {
        ctx.out.event({{"type", "forked"},
                       {"parent", id},
                       {"memory", !disk_only},
                       {"elapsedMs", ms},
                       {"sandboxes", children}});
    } else {
        ctx.out.text(sandbox_table(children));
        ctx.out.note(fmt::format("{} {} fork(s) of {} in {}", children.size(), disk_only ? "disk" : "memory",
                                 id, seconds(ms)));
    }
    return kExitOk;
}

int run_rm(const Context& ctx, const std::vector<std::string>& ids, const std::vector<std::string>& labels,
           bool dry_run) {
    if (ids.empty() == labels.empty()) {
        return ctx.out.fail(make_coded_error("usage", "rm: give sandbox ids or --label k=v, not both"));
    }
    int status = kExitOk;
    Json done = Json::array();
    auto report = [&](const std::string& id) {
        done.push_back(id);
        if (!ctx.out.json()) {
            ctx.out.text(fmt::format("{}{}\n", dry_run ? "would delete " : "deleted ", id));
        }
    };
    if (!labels.empty()) {
        // One request: sbxd picks the sandboxes and deletes them (docs/api.md,
        // DELETE /v1/sandboxes?labels=), or with dryRun only lists them.
        auto list = list_target(labels, {});
        if (!list) {
            return ctx.out.fail(list.error());
        }
        Outcome reply = call(ctx, del(*list + (dry_run ? "&dryRun=true" : "")));
        if (!reply.ok()) {
            return ctx.out.fail(reply.failure());
        }
        for (const auto& id : reply.body().value("deleted", Json::array())) {
            report(id.get<std::string>());
        }
        for (const auto& failed : reply.body().value("failed", Json::array())) {
            status = ctx.out.fail(make_coded_error(failed.value("code", "internal"), "{}: {}",
                                                   failed.value("id", ""), failed.value("message", "")));
        }
    }
    // Each sandbox on its own: one that fails does not keep the others.
    for (const auto& id : ids) {
        Outcome reply = call(ctx, dry_run ? get(sandbox_target(id)) : del(sandbox_target(id)));
        if (!reply.ok()) {
            status = ctx.out.fail(reply.failure());
            continue;
        }
        report(id);
    }
    if (ctx.out.json()) {
        ctx.out.event({{"type", "deleted"}, {"dryRun", dry_run}, {"deleted", done}});
    } else if (!labels.empty() && done.empty() && status == kExitOk) {
        ctx.out.note("no sandbox has those labels");
    }
    return status;
}

int run_history(const Context& ctx, const std::string& id) {
    Outcome reply = call(ctx, get(sandbox_target(id, "history")));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json history = reply.body().value("history", Json::array());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "history"}, {"id", id}, {"history", history}});
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& entry : history) {
        // The key it came with (SANDBOXER_TOKEN's from inside the guest), or
        // the Unix socket.
        const Json key = entry.value("keyId", Json());
        rows.push_back({cell(entry, "startedAt"), cell(entry, "exitCode"),
                        key.is_string() ? key.get<std::string>() : "socket",
                        shell_words(entry.value("command", Json()))});
    }
    ctx.out.text(format_table({"STARTED", "EXIT", "KEY", "COMMAND"}, rows));
    return kExitOk;
}

int run_events(const Context& ctx, std::uint64_t after, bool follow) {
    for (;;) {
        Outcome reply = call(ctx, get(target({"v1", "events"}, {{"after", std::to_string(after)}})));
        if (!reply.ok()) {
            return ctx.out.fail(reply.failure());
        }
        const Json events = reply.body().value("events", Json::array());
        if (ctx.out.json() && !follow) {
            ctx.out.event({{"type", "events"}, {"events", events}});
            return kExitOk;
        }
        for (const auto& event : events) {
            after = std::max<std::uint64_t>(after, event.value("id", std::uint64_t{0}));
            if (ctx.out.json()) {
                ctx.out.event({{"type", "event"}, {"event", event}});
            } else {
                ctx.out.text(fmt::format("{}  {}  {}  {}\n", cell(event, "at"), cell(event, "sandboxId"),
                                         cell(event, "type"), cell(event, "data")));
            }
        }
        if (!follow) {
            return kExitOk;
        }
        // sbxd keeps no open event stream yet: poll, and ask again at once
        // while whole pages come back.
        if (events.size() < 1000) {
            std::this_thread::sleep_for(std::chrono::seconds(1));
        }
    }
}

int run_snapshot_create(const Context& ctx, const std::string& id, const std::string& name) {
    Outcome reply = call(ctx, post(sandbox_target(id, "snapshot"), {{"name", name}}));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json snapshot = reply.body().value("snapshot", Json::object());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "snapshot"}, {"snapshot", snapshot}});
    } else {
        ctx.out.text(fmt::format("snapshot {} of {}{}\n", name, id,
                                 snapshot.value("memory", false) ? " (disk and memory)" : " (disk)"));
    }
    return kExitOk;
}

int run_snapshot_ls(const Context& ctx) {
    Outcome reply = call(ctx, get(target({"v1", "snapshots"})));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json snapshots = reply.body().value("snapshots", Json::array());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "snapshots"}, {"snapshots", snapshots}});
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& s : snapshots) {
        rows.push_back({cell(s, "name"), cell(s, "from"), s.value("memory", false) ? "yes" : "no",
                        cell(s, "image"), fmt::format("{}/{}/{}", cell(s, "cpus"), cell(s, "memoryMib"),
                                                      cell(s, "diskGib")),
                        fmt::format("{:.1f}", s.value("sizeBytes", 0.0) / (1024.0 * 1024.0)), cell(s, "createdAt")});
    }
    ctx.out.text(
        format_table({"NAME", "FROM", "MEMORY", "IMAGE", "CPUS/MIB/GIB", "SIZE MIB", "CREATED"}, rows));
    return kExitOk;
}

int run_snapshot_rm(const Context& ctx, const std::string& name) {
    Outcome reply = call(ctx, del(target({"v1", "snapshots", name})));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    if (ctx.out.json()) {
        ctx.out.event({{"type", "snapshot_deleted"}, {"name", name}});
    } else {
        ctx.out.text("deleted snapshot " + name + "\n");
    }
    return kExitOk;
}

}  // namespace sbx::cli

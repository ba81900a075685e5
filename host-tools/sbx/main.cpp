// sbx: the command line over sbxd's API (docs/sbx.md, docs/api.md).
//
//   sbx new | ls | info | exec | scp | logs | forward | ssh | ssh-proxy | ssh-config | stop | resume |
//   ttl | idle | egress | fork | snapshot | keys | rm | history | events | host | unhost | ca | desktop |
//   mcp
//
// SBX_HOST picks the daemon (unix:PATH, default unix:/run/sandboxer/sbxd.sock,
// or http://HOST:PORT with SBX_API_KEY). On a terminal it prints tables
// and lines; piped or with --json, JSON. Exit codes: output.hpp.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <string_view>

#include "host-tools/sbx/commands.hpp"

namespace {

using namespace sbx;
using namespace sbx::cli;

constexpr const char* kVersion = "0.1.0";

std::string env_or(const char* name, std::string_view fallback) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? std::string(value) : std::string(fallback);
}

struct Flags {
    bool json = false;
    std::string id, name;
    std::vector<std::string> ids, labels, states;
    NewCommand create;
    ExecCommand exec;
    bool disk_only = false, dry_run = false, follow = false, recursive = false;
    std::string size, disk, idempotency_key;
    unsigned count = 1;
    std::uint64_t after = 0;
    std::string from, to;
    std::string value;  // ttl's SECONDS|off, idle's MINUTES|off
    LogsCommand logs;
    std::string tail;  // logs --tail BYTES
    HostCommand host;
    DesktopCommand desktop;
    ForwardCommand forward;
    SshProxyCommand ssh_proxy;
    bool install = false;       // ssh-config --install
    bool no_authorize = false;  // ssh-proxy --no-authorize
    McpCommand mcp;
};

void add_labels(CLI::App* app, Flags& flags, const char* what) {
    app->add_option("--label", flags.labels, what)->type_name("K=V");
}

}  // namespace

int main(int argc, char** argv) {
    // A closed socket is an error value, not a signal.
    std::signal(SIGPIPE, SIG_IGN);
    bool json_wanted = ::isatty(STDOUT_FILENO) != 1;
    for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {  // before CLI11 has read it
        json_wanted = json_wanted || std::string_view(argv[i]) == "--json";
    }
    Output out(json_wanted);

    Flags f;
    CLI::App app{"sbx: disposable Linux microVMs, through sbxd (SBX_HOST, SBX_API_KEY)"};
    app.set_version_flag("--version", kVersion);
    app.add_flag("--json", f.json, "print JSON even on a terminal");
    app.require_subcommand(1);
    app.fallthrough();

    auto* create = app.add_subcommand("new", "create a sandbox and wait until it is ready");
    auto& c = f.create.create;
    create->add_option("--size", c.size, "small, default, large or xlarge");
    create->add_option("--cpus", c.cpus, "vCPUs (overrides the size)");
    create->add_option("--memory", c.memory, "memory: MiB, or 512M, 4G (overrides the size)");
    create->add_option("--disk", c.disk, "root disk: GiB, or 20G");
    create->add_option("--from", c.from, "an image or named snapshot");
    create->add_option("--label", c.labels, "a label (repeatable)")->type_name("K=V");
    create
        ->add_option("-e,--env", c.env,
                     "a variable in /etc/sandboxer/env (repeatable; K alone: its value here)")
        ->type_name("K=V");
    create->add_flag("--no-env", c.no_env, "none of the operator's variables inside");
    create->add_option("--idle", c.idle_minutes, "stop with memory after MIN idle minutes (0: never)")
        ->type_name("MIN");
    create->add_option("--ttl", c.ttl, "auto-stop after 90s, 30m, 2h30m, 7d (default 1h)")->type_name("DUR");
    create->add_flag("--no-auto-stop", c.no_auto_stop, "no auto-stop deadline");
    create->add_flag("--cold", c.cold, "boot cold: no warm template, no memory of a snapshot");
    create
        ->add_option("--egress", c.egress,
                     "internet (default), deny-all, or only these networks: 203.0.113.0/24,198.51.100.7/32")
        ->type_name("POLICY");
    create->add_option("--idempotency-key", f.create.idempotency_key,
                       "the same key and flags give the same sandbox");
    create->add_flag("--no-ssh", f.create.no_ssh, "do not authorize sbx's ssh key in it");

    auto* ls = app.add_subcommand("ls", "list sandboxes");
    add_labels(ls, f, "only sandboxes with this label (repeatable)");
    ls->add_option("--state", f.states, "only sandboxes in this state (repeatable, or a,b)");

    auto* info = app.add_subcommand("info", "one sandbox");
    info->add_option("id", f.id, "sandbox id")->required();

    auto* exec = app.add_subcommand("exec", "run a command in a sandbox: sbx exec ID [flags] -- CMD...");
    auto& e = f.exec;
    exec->add_option("id", e.id, "sandbox id")->required();
    exec->add_option("command", e.exec.command, "the command (words after -- are never read as sbx's flags)");
    exec->add_flag("-d,--detach", e.exec.detach, "start it and print its process id");
    exec->add_option("--status", e.status_process, "show a process's state and the end of its output")
        ->type_name("PROC");
    exec->add_option("--attach", e.attach_process, "follow a process's output to its exit")
        ->type_name("PROC");
    exec->add_option("--offset", e.offset, "with --attach: start at this byte of the output")->type_name("N");
    exec->add_option("-e,--env", e.exec.env,
                     "a variable for the command (repeatable; K alone: its value here)")
        ->type_name("K=V");
    exec->add_option("--cwd", e.exec.cwd, "working directory in the guest");
    exec->add_option("--user", e.exec.user, "the user it runs as");
    exec->add_option("--timeout", e.exec.timeout, "kill it after 30s, 5m, 500ms (exit 124)")
        ->type_name("DUR");
    exec->add_flag("-n,--no-stdin", e.no_stdin, "send no stdin even when ours is not a terminal");
    exec->add_flag("-t,--tty", e.tty, "run it on a pseudo-terminal (ours in raw mode, resizes follow)");

    auto* scp = app.add_subcommand(
        "scp", "copy a file (-r: a directory): sbx scp [-r] LOCAL ID:/PATH, or ID:/PATH LOCAL (- stdout)");
    scp->add_option("from", f.from, "source")->required();
    scp->add_option("to", f.to, "destination")->required();
    scp->add_flag("-r,--recursive", f.recursive, "copy directories whole (as tar), either way");

    auto* logs = app.add_subcommand("logs", "the guest's console: raw bytes on stdout, piped or not");
    logs->add_option("id", f.logs.id, "sandbox id")->required();
    auto* logs_tail =
        logs->add_option("--tail", f.tail, "only the last BYTES bytes (64K, 1M)")->type_name("BYTES");
    logs->add_flag("-f,--follow", f.logs.follow, "keep printing as it grows, until it stops or goes");

    auto* forward = app.add_subcommand(
        "forward", "carry TCP: forward ID LOCAL:REMOTE (host 127.0.0.1:LOCAL -> guest REMOTE), "
                   "forward --reverse ID REMOTE:LOCAL (guest REMOTE -> host 127.0.0.1:LOCAL); until Ctrl-C");
    forward->add_option("id", f.forward.id, "sandbox id")->required();
    forward->add_option("ports", f.forward.ports, "LOCAL:REMOTE (or PORT for both); 0 as the first: any free one")
        ->required()
        ->type_name("A:B");
    forward->add_flag("-R,--reverse", f.forward.reverse, "a host service made reachable in the guest");

    auto* ssh = app.add_subcommand("ssh", "ssh into a sandbox as root: sbx ssh ID [-- CMD...]");
    ssh->add_option("id", f.id, "sandbox id (or ID.sbx)")->required();

    auto* ssh_proxy = app.add_subcommand("ssh-proxy", "stdin/stdout to the guest's port 22 (ssh's ProxyCommand)");
    ssh_proxy->add_option("host", f.ssh_proxy.host, "sandbox id, or ID.sbx (ssh's %h)")->required();
    ssh_proxy->add_option("--port", f.ssh_proxy.port, "another guest port (default 22)")->type_name("N");
    ssh_proxy->add_flag("--no-authorize", f.no_authorize, "do not make sure sbx's key is authorized first");

    auto* ssh_config = app.add_subcommand("ssh-config", "print (--install: add to ~/.ssh/config) a Host *.sbx stanza");
    ssh_config->add_flag("--install", f.install, "append it to ~/.ssh/config, once");

    auto* stop = app.add_subcommand("stop", "stop a sandbox (with its memory unless --disk-only)");
    stop->add_option("id", f.id, "sandbox id")->required();
    stop->add_flag("--disk-only", f.disk_only, "keep only the disk; the next resume boots");

    auto* resume = app.add_subcommand("resume", "resume a stopped sandbox");
    resume->add_option("id", f.id, "sandbox id")->required();
    resume->add_option("--type", f.size, "a new size (a cold boot)")->type_name("SIZE");
    resume->add_option("--disk", f.disk, "a bigger root disk: GiB, or 20G (a cold boot; files kept)");

    auto* ttl = app.add_subcommand("ttl", "a new auto-stop from now: sbx ttl ID SECONDS|DUR|off");
    ttl->add_option("id", f.id, "sandbox id")->required();
    ttl->add_option("seconds", f.value, "seconds, or 90s, 30m, 2h, 7d; off: no auto-stop")
        ->required()
        ->type_name("SECONDS|off");

    auto* idle = app.add_subcommand("idle", "the idle pause: sbx idle ID MINUTES|off");
    idle->add_option("id", f.id, "sandbox id")->required();
    idle->add_option("minutes", f.value, "stop with memory after this many idle minutes; off (or 0): never")
        ->required()
        ->type_name("MINUTES|off");

    auto* egress = app.add_subcommand("egress", "the egress policy: sbx egress ID internet|deny-all|NET[,NET...]");
    egress->add_option("id", f.id, "sandbox id")->required();
    egress->add_option("policy", f.value, "internet, deny-all, or only these networks (an allow list)")
        ->required()
        ->type_name("POLICY");

    auto* fork = app.add_subcommand("fork", "new sandboxes from a running one");
    fork->add_option("id", f.id, "sandbox id")->required();
    fork->add_option("--count", f.count, "how many (1-16)")->type_name("N");
    fork->add_flag("--disk-only", f.disk_only, "copies of the disk that boot fresh, not of the memory");
    fork->add_option("--idempotency-key", f.idempotency_key, "the same key and flags give the same forks");

    auto* snapshot =
        app.add_subcommand("snapshot", "named snapshots: snapshot ID NAME | snapshot ls | snapshot rm NAME");
    snapshot->add_option("id", f.id, "the sandbox to snapshot");
    snapshot->add_option("name", f.name, "the snapshot's name");
    auto* snapshot_ls = snapshot->add_subcommand("ls", "list named snapshots");
    auto* snapshot_rm = snapshot->add_subcommand("rm", "delete a named snapshot");
    snapshot_rm->add_option("name", f.name, "snapshot name")->required();

    KeyOptions key;
    auto* keys = app.add_subcommand("keys", "API keys: keys create [flags] | keys ls | keys rm KEY_ID...");
    keys->require_subcommand(1);
    auto* keys_create = keys->add_subcommand("create", "a new API key; its secret is printed once");
    keys_create->add_option("--name", key.name, "a name for people");
    keys_create->add_option("--sandbox", key.sandbox, "scope it to this sandbox (default: the whole host)")
        ->type_name("ID");
    keys_create->add_flag("--read-only", key.read_only, "GET and HEAD only");
    keys_create->add_option("--expires", key.expires, "refused after this long: 3600, 90m, 12h, 30d")
        ->type_name("DUR");
    keys->add_subcommand("ls", "list API keys (never their secrets)");
    auto* keys_rm = keys->add_subcommand("rm", "revoke API keys");
    keys_rm->add_option("ids", f.ids, "key ids (key_...)")->required();

    auto* rm = app.add_subcommand("rm", "delete sandboxes: rm ID... or rm --label K=V");
    rm->add_option("ids", f.ids, "sandbox ids");
    add_labels(rm, f, "every sandbox with this label (repeatable)");
    rm->add_flag("--dry-run", f.dry_run, "only say which sandboxes would go");

    auto* history = app.add_subcommand("history", "the commands run in a sandbox");
    history->add_option("id", f.id, "sandbox id")->required();

    auto* events = app.add_subcommand("events", "the host's sandbox events");
    events->add_option("--after", f.after, "only events after this id")->type_name("ID");
    events->add_flag("-f,--follow", f.follow, "keep printing new events");

    auto* host_cmd = app.add_subcommand(
        "host", "serve a port at https://<subdomain>-<port>.<domain>: host ID PORT [--public] [--localhost] | host ls [ID]");
    host_cmd->add_option("id", f.host.id, "sandbox id");
    host_cmd->add_option("port", f.host.port, "the guest port")->type_name("PORT");
    host_cmd->add_flag("--public", f.host.is_public, "no token: anyone with the URL gets in");
    host_cmd->add_flag("--localhost", f.host.localhost, "the app listens on the guest's 127.0.0.1");
    auto* host_ls = host_cmd->add_subcommand("ls", "hosted ports, of one sandbox or all");
    host_ls->add_option("id", f.id, "sandbox id");
    auto* unhost = app.add_subcommand("unhost", "stop serving a hosted port: unhost ID PORT");
    unhost->add_option("id", f.id, "sandbox id")->required();
    unhost->add_option("port", f.host.port, "the guest port")->required()->type_name("PORT");
    auto* ca = app.add_subcommand("ca", "sbxd's CA certificate (PEM), for clients to trust its hosted URLs");

    auto& d = f.desktop;
    auto* desktop = app.add_subcommand(
        "desktop", "the desktop: desktop ID (start; print its link) | status | screenshot [-o FILE] | "
                   "click X Y | move X Y | type TEXT | key KEYS | scroll X Y DIR [N] | cursor");
    desktop->add_option("id", d.id, "sandbox id")->required();
    desktop->add_option("action", d.words, "what to do (none: start it and print its link)")
        ->type_name("ACTION ARGS...");
    desktop->add_flag("--view-only", d.view_only, "print the link that shows the screen but takes no input");
    desktop->add_option("--display", d.display, "start: the X display (default 1)")->type_name("N");
    desktop->add_option("--width", d.width, "start: the screen's width (default 1280)")->type_name("PX");
    desktop->add_option("--height", d.height, "start: the screen's height (default 800)")->type_name("PX");
    desktop->add_option("-o,--output", d.output, "screenshot: the PNG's file (- for stdout; default ID-screenshot.png)")
        ->type_name("FILE");
    desktop->add_option("--max-width", d.max_width, "screenshot: scaled down to at most this wide")->type_name("N");
    desktop->add_option("--button", d.flags.button, "click: left, right or middle")->type_name("BUTTON");
    desktop->add_flag("--double", d.flags.double_click, "click: a double click");
    desktop->add_flag("--triple", d.flags.triple_click, "click: a triple click");

    auto* mcp = app.add_subcommand("mcp", "an MCP server on stdio whose tools drive this host's sandboxes");
    mcp->add_option("--config", f.mcp.config, "defaults from this TOML file (default ~/.config/sandboxer/mcp.toml)");
    mcp->add_option("--size", f.mcp.size, "the size of sandboxes it creates: small, default, large, xlarge");
    mcp->add_option("--ttl", f.mcp.ttl, "their auto-stop: 30m, 2h, 1d");
    mcp->add_option("--idle-minutes", f.mcp.idle_minutes, "pause them when idle this long");
    mcp->add_option("--label", f.mcp.labels, "a label on every sandbox it creates")->type_name("K=V");

    // Everything after the first `--` is exec's command, kept from CLI11,
    // which would otherwise match its words against sbx's own subcommands.
    std::vector<std::string> args(argv + 1, argv + argc), after_dashes;
    if (auto dashes = std::find(args.begin(), args.end(), "--"); dashes != args.end()) {
        after_dashes.assign(dashes + 1, args.end());
        args.erase(dashes, args.end());
    }
    std::reverse(args.begin(), args.end());
    try {
        app.parse(args);
    } catch (const CLI::ParseError& error) {
        if (error.get_exit_code() == 0) {
            return app.exit(error);
        }
        return out.fail(make_coded_error("usage", "{} (sbx --help)", error.what()));
    }
    if (*snapshot && !*snapshot_ls && !*snapshot_rm && (f.id.empty() || f.name.empty())) {
        return out.fail(make_coded_error("usage", "snapshot: want ID NAME, ls, or rm NAME"));
    }
    if (*host_cmd && !*host_ls && (f.host.id.empty() || f.host.port == 0)) {
        return out.fail(make_coded_error("usage", "host: want ID PORT (1-65535), or ls [ID]"));
    }
    if (*exec && !e.status_process.empty() + !e.attach_process.empty() + e.exec.detach > 1) {
        return out.fail(
            make_coded_error("usage", "exec: --detach, --status and --attach exclude each other"));
    }
    e.raw_events = f.json;
    f.logs.json = f.json;
    if (logs_tail->count() > 0) {
        auto bytes = parse_byte_count(f.tail, "--tail");
        if (!bytes) {
            return out.fail(bytes.error());
        }
        f.logs.tail = *bytes;
    }
    if (!after_dashes.empty() && !*exec && !*ssh && !*desktop) {
        return out.fail(make_coded_error("usage", "only exec, ssh and desktop take -- ..."));
    }
    if (*desktop) {
        d.words.insert(d.words.end(), after_dashes.begin(), after_dashes.end());
    }
    f.ssh_proxy.authorize = !f.no_authorize;
    e.exec.command.insert(e.exec.command.end(), after_dashes.begin(), after_dashes.end());

    auto host = parse_host_address(env_or("SBX_HOST", kDefaultHost));
    if (!host) {
        return out.fail(host.error());
    }
    Context ctx{HttpClient(*host, env_or("SBX_API_KEY", "")), out};

    if (*create)
        return run_new(ctx, f.create);
    if (*ls)
        return run_ls(ctx, f.labels, f.states);
    if (*info)
        return run_info(ctx, f.id);
    if (*exec)
        return run_exec(ctx, f.exec);
    if (*scp)
        return run_scp(ctx, f.from, f.to, f.recursive);
    if (*logs)
        return run_logs(ctx, f.logs);
    if (*forward)
        return run_forward(ctx, f.forward);
    if (*ssh)
        return run_ssh(ctx, f.id, after_dashes);
    if (*ssh_proxy)
        return run_ssh_proxy(ctx, f.ssh_proxy);
    if (*ssh_config)
        return run_ssh_config(ctx, f.install);
    if (*stop)
        return run_stop(ctx, f.id, f.disk_only);
    if (*resume)
        return run_resume(ctx, f.id, f.size, f.disk);
    if (*ttl)
        return run_ttl(ctx, f.id, f.value);
    if (*idle)
        return run_idle(ctx, f.id, f.value);
    if (*egress)
        return run_egress(ctx, f.id, f.value);
    if (*fork)
        return run_fork(ctx, f.id, f.count, f.disk_only, f.idempotency_key);
    if (*keys_create)
        return run_keys_create(ctx, key);
    if (*keys_rm)
        return run_keys_rm(ctx, f.ids);
    if (*keys)
        return run_keys_ls(ctx);
    if (*snapshot_ls)
        return run_snapshot_ls(ctx);
    if (*snapshot_rm)
        return run_snapshot_rm(ctx, f.name);
    if (*snapshot)
        return run_snapshot_create(ctx, f.id, f.name);
    if (*rm)
        return run_rm(ctx, f.ids, f.labels, f.dry_run);
    if (*history)
        return run_history(ctx, f.id);
    if (*events)
        return run_events(ctx, f.after, f.follow);
    if (*host_ls)
        return run_host_ls(ctx, f.id);
    if (*host_cmd)
        return run_host(ctx, f.host);
    if (*unhost)
        return run_unhost(ctx, f.id, f.host.port);
    if (*ca)
        return run_ca(ctx);
    if (*desktop)
        return run_desktop(ctx, f.desktop);
    if (*mcp)
        return run_mcp(ctx, f.mcp, kVersion);
    return kExitUsage;
}

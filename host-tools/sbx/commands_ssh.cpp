// sbx ssh, sbx ssh-config and the key's authorization in a guest
// (docs/sbx.md, "ssh"). The connection itself is sbx ssh-proxy
// (commands_forward.cpp), run by ssh as its ProxyCommand.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <sstream>

#include "host-tools/sbx/commands.hpp"
#include "host-tools/sbx/ssh_setup.hpp"

namespace sbx::cli {

namespace {

constexpr const char* kAuthorizedKeys = "/root/.ssh/authorized_keys";

Result<SshPaths> user_ssh_paths() {
    auto dir = sbx_config_dir(std::getenv("XDG_CONFIG_HOME"), std::getenv("HOME"));
    if (!dir) {
        return dir.error();
    }
    return ssh_paths(*dir);
}

// This very sbx, for the ProxyCommand.
Result<std::string> own_path() {
    char path[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) {
        return sys_error("readlink /proc/self/exe");
    }
    return std::string(path, static_cast<std::size_t>(n));
}

bool has_line(const std::string& text, const std::string& wanted) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line == wanted) {
            return true;
        }
    }
    return false;
}

}  // namespace

Result<void> authorize_ssh_key(const Context& ctx, const std::string& id) {
    auto paths = user_ssh_paths();
    if (!paths) {
        return paths.error();
    }
    auto key = ensure_ssh_key(*paths);
    if (!key) {
        return key.error();
    }
    // Reading the file first adds nothing to the sandbox's history when the key is there.
    auto current = ctx.client.send(get(target({"v1", "sandboxes", id, "files"}, {{"path", kAuthorizedKeys}})));
    if (current && current->status == 200 && has_line(current->body, *key)) {
        return ok();
    }
    Json body = {{"command", {"/bin/sh", "-c", authorize_key_script(), "sh", *key}}, {"user", "root"}};
    auto reply = ctx.client.send(post(target({"v1", "sandboxes", id, "exec"}), body));
    if (!reply) {
        return reply.error();
    }
    if (reply->status != 200) {
        return make_coded_error("authorize_failed", "authorizing the ssh key in {}: {}", id,
                                failure_of(*reply).message);
    }
    // The NDJSON exec stream's last line is the exit (docs/api.md, exec).
    std::istringstream lines(reply->body);
    for (std::string line; std::getline(lines, line);) {
        Json event = Json::parse(line, nullptr, false);
        if (event.is_object() && event.value("type", "") == "exit") {
            if (event.value("exitCode", Json()) == 0) {
                return ok();
            }
            break;
        }
    }
    return make_coded_error("authorize_failed", "authorizing the ssh key in {}: the guest's script failed", id);
}

int run_ssh(const Context& ctx, const std::string& id, const std::vector<std::string>& command) {
    auto paths = user_ssh_paths();
    if (!paths) {
        return ctx.out.fail(paths.error());
    }
    if (auto key = ensure_ssh_key(*paths); !key) {
        return ctx.out.fail(key.error());
    }
    auto sbx = own_path();
    if (!sbx) {
        return own_failure(ctx, failure_of(sbx.error()));
    }
    const std::string host = strip_sbx_suffix(id) + ".sbx";
    // ssh_config(5) options on the command line, so no ~/.ssh/config is needed.
    std::vector<std::string> args = {"ssh",
                                     "-o", "ProxyCommand=" + shell_quote(*sbx) + " ssh-proxy %h",
                                     "-o", "UserKnownHostsFile=" + paths->known_hosts,
                                     "-o", "StrictHostKeyChecking=accept-new",
                                     "-o", "IdentitiesOnly=yes",
                                     "-i", paths->key,
                                     "-l", "root",
                                     "--", host};
    args.insert(args.end(), command.begin(), command.end());
    std::vector<char*> argv;
    for (auto& arg : args) {
        argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    ::execvp("ssh", argv.data());
    return ctx.out.fail(make_coded_error("local", "cannot run ssh (install openssh-client): {}",
                                         std::strerror(errno)));
}

int run_ssh_config(const Context& ctx, bool install) {
    auto paths = user_ssh_paths();
    if (!paths) {
        return ctx.out.fail(paths.error());
    }
    if (auto key = ensure_ssh_key(*paths); !key) {
        return ctx.out.fail(key.error());
    }
    auto sbx = own_path();
    if (!sbx) {
        return own_failure(ctx, failure_of(sbx.error()));
    }
    const std::string stanza = ssh_config_stanza(*sbx, *paths);
    if (!install) {
        if (ctx.out.json()) {
            ctx.out.event({{"type", "ssh_config"}, {"stanza", stanza}, {"key", paths->key}});
        } else {
            ctx.out.text(stanza);
        }
        return kExitOk;
    }
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home != '/') {
        return ctx.out.fail(make_coded_error("local", "HOME is not set: where is ~/.ssh/config?"));
    }
    const std::string config = std::string(home) + "/.ssh/config";
    auto added = install_ssh_config(config, stanza);
    if (!added) {
        return ctx.out.fail(added.error());
    }
    if (ctx.out.json()) {
        ctx.out.event({{"type", "ssh_config"}, {"installed", *added}, {"file", config}, {"key", paths->key}});
    } else {
        ctx.out.text(*added ? fmt::format("added Host *.sbx to {}: ssh ID.sbx now reaches sandbox ID\n", config)
                            : fmt::format("{} already has a Host *.sbx stanza: left as it is\n", config));
    }
    return kExitOk;
}

}  // namespace sbx::cli

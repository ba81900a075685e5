// sbx's own ssh setup (docs/sbx.md, "ssh"): where its config lives
// ($XDG_CONFIG_HOME/sandboxer, else ~/.config/sandboxer), the per-user
// ed25519 key under it (made by ssh-keygen on first use), its own
// known_hosts, and the `Host *.sbx` stanza for ~/.ssh/config
// (ssh_config(5)) whose ProxyCommand is `sbx ssh-proxy %h`.
#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::cli {

struct SshPaths {
    std::string dir;          // CONFIG/ssh, 0700
    std::string key;          // CONFIG/ssh/id_ed25519 (0600), and .pub beside it
    std::string known_hosts;  // CONFIG/ssh/known_hosts
};

// From XDG_CONFIG_HOME and HOME (as given, for tests); error code "local"
// when neither is set.
[[nodiscard]] Result<std::string> sbx_config_dir(const char* xdg_config_home, const char* home);
[[nodiscard]] SshPaths ssh_paths(const std::string& config_dir);

// The public key line ("ssh-ed25519 AAAA… sbx"), made with
// `ssh-keygen -t ed25519` first when the key is missing.
[[nodiscard]] Result<std::string> ensure_ssh_key(const SshPaths& paths);

// "sbx_1.sbx" -> "sbx_1"; anything else as it is.
[[nodiscard]] std::string strip_sbx_suffix(std::string_view host);

// A word for a shell command line (ProxyCommand runs through the user's
// shell): as it is when it is safe, else single-quoted.
[[nodiscard]] std::string shell_quote(std::string_view word);

// The stanza, `sbx_path` the absolute path of sbx.
[[nodiscard]] std::string ssh_config_stanza(const std::string& sbx_path, const SshPaths& paths);
// Appends the stanza to `config_file` (made 0600 with its folder 0700 if
// missing) unless it already has a `Host *.sbx` line: true when added.
[[nodiscard]] Result<bool> install_ssh_config(const std::string& config_file, const std::string& stanza);

// The shell script that authorizes "$1" for root in the guest, once
// (mkdir 0700 /root/.ssh, authorized_keys 0600, the line appended unless
// it is there), then waits up to 60 s for the guest's sshd to listen.
[[nodiscard]] std::string authorize_key_script();

}  // namespace sbx::cli

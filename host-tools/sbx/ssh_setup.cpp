#include "host-tools/sbx/ssh_setup.hpp"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/unique_fd.hpp"

extern char** environ;

namespace sbx::cli {

namespace {

constexpr std::size_t kMaxConfigBytes = 1 << 20;

Result<void> make_dir(const std::string& path, mode_t mode) {
    if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
        return sys_error("mkdir {}", path);
    }
    return ok();
}

// mkdir -p, each new folder `mode`.
Result<void> make_dirs(const std::string& path, mode_t mode) {
    for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
        if (auto r = make_dir(path.substr(0, slash), mode); !r) {
            return r;
        }
    }
    return make_dir(path, mode);
}

// Runs ssh-keygen with its stdout on our stderr (ssh-proxy's stdout is ssh's channel).
Result<void> run_ssh_keygen(const std::string& key) {
    std::vector<std::string> args = {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sbx", "-f", key};
    std::vector<char*> argv;
    for (auto& arg : args) {
        argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    pid_t pid = 0;
    int spawned = ::posix_spawnp(&pid, "ssh-keygen", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) {
        return make_coded_error("local", "cannot run ssh-keygen (install openssh-client): {}", std::strerror(spawned));
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        return make_coded_error("local", "ssh-keygen failed making {}", key);
    }
    return ok();
}

}  // namespace

Result<std::string> sbx_config_dir(const char* xdg_config_home, const char* home) {
    if (xdg_config_home != nullptr && *xdg_config_home == '/') {
        return std::string(xdg_config_home) + "/sandboxer";
    }
    if (home != nullptr && *home == '/') {
        return std::string(home) + "/.config/sandboxer";
    }
    return make_coded_error("local", "neither XDG_CONFIG_HOME nor HOME is an absolute path");
}

SshPaths ssh_paths(const std::string& config_dir) {
    const std::string dir = config_dir + "/ssh";
    return SshPaths{dir, dir + "/id_ed25519", dir + "/known_hosts"};
}

Result<std::string> ensure_ssh_key(const SshPaths& paths) {
    const std::string public_key = paths.key + ".pub";
    if (::access(paths.key.c_str(), F_OK) != 0 || ::access(public_key.c_str(), F_OK) != 0) {
        if (auto r = make_dirs(paths.dir, 0700); !r) {
            return make_coded_error("local", "{}", r.error().to_string());
        }
        ::unlink(paths.key.c_str());  // half a pair: ssh-keygen would ask before overwriting
        ::unlink(public_key.c_str());
        if (auto r = run_ssh_keygen(paths.key); !r) {
            return r.error();
        }
    }
    auto text = read_file(public_key, 16 * 1024);
    if (!text) {
        return make_coded_error("local", "{}", text.error().to_string());
    }
    std::string line = text->substr(0, text->find('\n'));
    if (line.rfind("ssh-ed25519 ", 0) != 0) {
        return make_coded_error("local", "{} is not an ed25519 public key", public_key);
    }
    return line;
}

std::string strip_sbx_suffix(std::string_view host) {
    constexpr std::string_view kSuffix = ".sbx";
    if (host.size() > kSuffix.size() && host.substr(host.size() - kSuffix.size()) == kSuffix) {
        host.remove_suffix(kSuffix.size());
    }
    return std::string(host);
}

std::string shell_quote(std::string_view word) {
    const bool safe = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                              "0123456789/._-+:=@%") == std::string_view::npos;
    if (safe) {
        return std::string(word);
    }
    std::string quoted = "'";
    for (char c : word) {
        quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return quoted + "'";
}

std::string ssh_config_stanza(const std::string& sbx_path, const SshPaths& paths) {
    // ssh_config(5): %h is the host name as given (ID.sbx); sbx strips .sbx.
    // Paths with blanks are quoted (ssh_config(5) "arguments may be enclosed in double quotes").
    auto config_path = [](const std::string& path) {
        return path.find_first_of(" \t") == std::string::npos ? path : "\"" + path + "\"";
    };
    return fmt::format(
        "# Added by `sbx ssh-config --install`: ssh ID.sbx reaches sandbox ID through sbxd (no open ports).\n"
        "Host *.sbx\n"
        "    ProxyCommand {} ssh-proxy %h\n"
        "    User root\n"
        "    IdentityFile {}\n"
        "    IdentitiesOnly yes\n"
        "    UserKnownHostsFile {}\n"
        "    StrictHostKeyChecking accept-new\n",
        shell_quote(sbx_path), config_path(paths.key), config_path(paths.known_hosts));
}

Result<bool> install_ssh_config(const std::string& config_file, const std::string& stanza) {
    const auto slash = config_file.rfind('/');
    if (slash != std::string::npos && slash > 0) {
        if (auto r = make_dirs(config_file.substr(0, slash), 0700); !r) {
            return make_coded_error("local", "{}", r.error().to_string());
        }
    }
    std::string existing;
    if (::access(config_file.c_str(), F_OK) == 0) {
        auto text = read_file(config_file, kMaxConfigBytes);
        if (!text) {
            return make_coded_error("local", "{}", text.error().to_string());
        }
        existing = std::move(*text);
    }
    std::istringstream lines(existing);
    for (std::string line; std::getline(lines, line);) {
        auto start = line.find_first_not_of(" \t");
        if (start != std::string::npos && line.compare(start, 10, "Host *.sbx") == 0 &&
            line.find_first_not_of(" \t", start + 10) == std::string::npos) {
            return false;
        }
    }
    UniqueFd fd(::open(config_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
    if (!fd) {
        return make_coded_error("local", "opening {}: {}", config_file, std::strerror(errno));
    }
    // Appended, so the stanza ends no block of the user's; a `Host *` above it
    // that sets User or IdentityFile wins (ssh_config(5): the first value counts).
    std::string text = existing.empty() || existing.back() == '\n' ? "" : "\n";
    text += (existing.empty() ? "" : "\n") + stanza;
    if (auto r = write_all(fd.get(), text.data(), text.size()); !r) {
        return make_coded_error("local", "writing {}: {}", config_file, r.error().to_string());
    }
    return true;
}

std::string authorize_key_script() {
    return "set -e; umask 077; mkdir -p /root/.ssh; chmod 700 /root/.ssh; "
           "f=/root/.ssh/authorized_keys; touch \"$f\"; chmod 600 \"$f\"; "
           "grep -qxF \"$1\" \"$f\" || printf '%s\\n' \"$1\" >> \"$f\"; "
           // A new sandbox's sshd may still be starting (its first boot makes
           // the host key): wait up to 60 s for a listener on port 22 in
           // /proc/net/tcp (state 0A, LISTEN), so ssh works when sbx new ends.
           "[ -x /usr/sbin/sshd ] || exit 0; i=0; "
           "while [ $i -lt 600 ] && ! grep -q ':0016 00000000:0000 0A' /proc/net/tcp; do sleep 0.1; i=$((i+1)); done";
}

}  // namespace sbx::cli

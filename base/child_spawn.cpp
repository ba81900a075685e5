#include "base/child_spawn.hpp"

#include <fcntl.h>

#include <csignal>

extern char** environ;  // NOLINT: posix_spawn's environment

namespace sbx {

SpawnAttributes::SpawnAttributes() {
    posix_spawnattr_init(&attr_);
    posix_spawn_file_actions_init(&actions_);
}

SpawnAttributes::~SpawnAttributes() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
}

Result<pid_t> spawn_session_leader(const std::string& program, const std::vector<std::string>& args,
                                   const std::string& log_path) {
    std::vector<char*> argv;
    argv.reserve(args.size() + 2);
    argv.push_back(const_cast<char*>(program.c_str()));  // NOLINT: posix_spawn's signature
    for (const auto& arg : args) {
        argv.push_back(const_cast<char*>(arg.c_str()));  // NOLINT: posix_spawn's signature
    }
    argv.push_back(nullptr);

    SpawnAttributes s;
    sigset_t none;
    sigemptyset(&none);
    sigset_t defaults;
    sigfillset(&defaults);
    posix_spawnattr_setsigmask(s.attr(), &none);
    posix_spawnattr_setsigdefault(s.attr(), &defaults);
    posix_spawnattr_setflags(s.attr(), POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawn_file_actions_addopen(s.actions(), 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(s.actions(), 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(s.actions(), 1, 2);
    posix_spawn_file_actions_addclosefrom_np(s.actions(), 3);

    pid_t pid = -1;
    if (int err = posix_spawn(&pid, program.c_str(), s.actions(), s.attr(), argv.data(), environ); err != 0) {
        return errno_error("starting " + program, err);
    }
    return pid;
}

}  // namespace sbx

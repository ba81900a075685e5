// What several fuzz targets share beyond libFuzzer: a check that stops the
// run where it fails, and a scratch directory for the whole run.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace sbx::fuzz {

inline void check(bool holds) {
    if (!holds) {
        __builtin_trap();
    }
}

// sbx-fuzz-<name>-XXXXXX in /dev/shm (or /tmp), removed with what is in it
// at exit. tmpfs: closing a socket bound on ext4 under a directory since
// removed (as listen_unix binds) takes milliseconds there.
class RunDir {
public:
    explicit RunDir(const std::string& name) {
        const bool shm = ::access("/dev/shm", W_OK | X_OK) == 0;
        std::string templ = std::string(shm ? "/dev/shm" : "/tmp") + "/sbx-fuzz-" + name + "-XXXXXX";
        check(::mkdtemp(templ.data()) != nullptr);
        path_ = templ;
    }
    ~RunDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    RunDir(const RunDir&) = delete;
    RunDir& operator=(const RunDir&) = delete;
    [[nodiscard]] const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace sbx::fuzz

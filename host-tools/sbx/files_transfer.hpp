// What scp's two halves share (commands_files.cpp: one file;
// commands_tree.cpp: a directory as tar): the progress line, local
// failures, and the entry points run_scp picks between.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "host-tools/sbx/commands.hpp"

namespace sbx::cli {

// "12.5 MiB / 100.0 MiB  12%" on stderr, redrawn in place on a terminal
// ("12.5 MiB" when the total is not known: a tar stream).
class Progress {
public:
    Progress(bool shown, std::uint64_t total)
        : shown_(shown && ::isatty(STDERR_FILENO) == 1), total_(total) {}
    ~Progress() {
        if (drawn_) {
            (void)std::fputc('\n', stderr);
        }
    }
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    void update(std::uint64_t done) {
        if (!shown_ || (done - last_ < (1u << 20) && done != total_)) {
            return;
        }
        last_ = done;
        drawn_ = true;
        auto mib = [](std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
        if (total_ != 0) {
            (void)std::fprintf(stderr, "\r%8.1f MiB / %.1f MiB %3u%%", mib(done), mib(total_),
                               static_cast<unsigned>(done * 100 / total_));
        } else {
            (void)std::fprintf(stderr, "\r%8.1f MiB", mib(done));
        }
        (void)std::fflush(stderr);
    }

private:
    bool shown_;
    std::uint64_t total_;
    std::uint64_t last_ = 0;
    bool drawn_ = false;
};

// A local file that could not be read or written: code "local", exit 4.
[[nodiscard]] inline Failure local_failure(const Error& error) {
    Failure failure = failure_of(error);
    failure.code = "local";
    failure.exit_code = kExitLocal;
    return failure;
}

// commands_tree.cpp (scp -r): a local directory into the sandbox, a
// sandbox's directory here; whether a sandbox path is a directory (a
// symlink to one too).
int upload_tree(const Context& ctx, const std::string& local, const CopyEnd& remote);
int download_tree(const Context& ctx, const CopyEnd& remote, const std::string& local);
[[nodiscard]] bool remote_is_dir(const Context& ctx, const CopyEnd& remote);

}  // namespace sbx::cli

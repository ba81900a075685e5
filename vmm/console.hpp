// Where the guest's serial console goes: stdout (with stdin as input), a
// file, a connected Unix socket, or nowhere. Output is written without ever
// blocking the VMM: a reader that stalls loses bytes, never the VM.
#pragma once

#include <string_view>

#include "base/unique_fd.hpp"
#include "vmm/config.hpp"

namespace sbx {

class Console {
public:
    Console() = default;  // no console: output is discarded, no input
    static Result<Console> open(const ConsoleConfig& config);

    // The fd to watch for EPOLLOUT when write_some() could not take
    // everything (-1 when there is no output or it never blocks).
    [[nodiscard]] int pollable_output_fd() const { return pollable_ && !broken_ ? out_.get() : -1; }
    // The fd the guest's console input comes from, or -1.
    [[nodiscard]] int input_fd() const { return in_fd_; }
    // Writes what the sink takes now; returns how many bytes it took. When
    // the reader has gone (EPIPE, a closed socket) the console becomes a
    // sink that takes everything, so the guest never notices.
    std::size_t write_some(std::string_view data);

private:
    // File output under ConsoleConfig::max_bytes: written at size_ with
    // pwrite, and compacted when it passes limit_.
    std::size_t write_bounded(std::string_view data);
    [[nodiscard]] bool drop_oldest_half();

    UniqueFd out_;
    std::uint64_t limit_ = 0;    // 0: unbounded (O_APPEND writes)
    std::uint64_t size_ = 0;     // the file's size, with limit_
    std::uint64_t dropped_ = 0;     // output dropped so far, with limit_
    std::uint64_t note_bytes_ = 0;  // the note at the file's front, with limit_
    bool broken_ = false;    // the reader went away; kept open so fd numbers stay ours
    bool socket_ = false;    // use send(MSG_NOSIGNAL): no SIGPIPE from a library
    bool pollable_ = false;  // a pipe, tty or socket; regular files never block
    int in_fd_ = -1;         // stdin or out_ (socket); not owned separately
};

}  // namespace sbx

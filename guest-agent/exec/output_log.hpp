// A detached process's output log (docs/agent-protocol.md, "Detached"):
// stdout and stderr interleaved in one byte-offset space, of which the last
// kCapacity bytes are kept in a ring. Each byte keeps its channel: the log
// records where the channel changes (a "run"). Offsets are absolute and
// never reused, so a reader that remembers the last offset it got can
// continue from there, or learns that the bytes are gone.
//
// Not thread-safe: the owning DetachedProcess locks around it.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "guest-agent/protocol/frame.hpp"

namespace sbx::agent {

class OutputLog {
public:
    static constexpr std::size_t kCapacity = 16 << 20;
    // A process alternating channels byte by byte would make one run per
    // byte; the runs are bounded too (16 bytes each: 16 MiB at most).
    static constexpr std::size_t kMaxRuns = 1 << 20;

    explicit OutputLog(std::size_t capacity = kCapacity, std::size_t max_runs = kMaxRuns)
        : capacity_(capacity), max_runs_(max_runs) {}

    void append(Channel channel, std::span<const std::uint8_t> bytes);

    [[nodiscard]] std::uint64_t first_offset() const { return first_; }
    [[nodiscard]] std::uint64_t end_offset() const { return end_; }

    // One piece of retained output: bytes of one channel from `offset`.
    struct Piece {
        Channel channel = Channel::Stdout;
        std::uint64_t offset = 0;
        std::vector<std::uint8_t> bytes;
    };
    // Up to `max_bytes` from `offset` (first_offset() ≤ offset ≤
    // end_offset()), stopping where the channel changes. Empty at the end.
    [[nodiscard]] Piece read(std::uint64_t offset, std::size_t max_bytes) const;
    // The last `max_bytes` of output, channels merged (proc_status's tail).
    [[nodiscard]] std::vector<std::uint8_t> tail(std::size_t max_bytes) const;

private:
    struct Run {
        std::uint64_t start;
        Channel channel;
    };
    void copy_out(std::uint64_t offset, std::size_t length, std::vector<std::uint8_t>& out) const;
    void drop_runs_before_first();

    std::size_t capacity_;
    std::size_t max_runs_;
    // Byte at offset o lives at ring_[o % capacity_]. The ring grows as
    // output comes, so a quiet process costs little.
    std::vector<std::uint8_t> ring_;
    std::deque<Run> runs_;  // in offset order; runs_.front().start ≤ first_
    std::uint64_t first_ = 0;
    std::uint64_t end_ = 0;
};

}  // namespace sbx::agent
